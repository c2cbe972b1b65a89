// wire/ sits on protocol/ alone: check_layers rejects this one.
#include "protocol/error.hpp"
#include "settings/config.hpp"
