// A fleet/ file that reaches up into the store: check_layers must reject it.
#include "store/results.hpp"
