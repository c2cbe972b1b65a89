// The store may use SQLite: check_layers accepts this one.
#include <sqlite3.h>
