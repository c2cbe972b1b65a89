// SQLite outside store/: check_layers must reject it.
#include <sqlite3.h>
