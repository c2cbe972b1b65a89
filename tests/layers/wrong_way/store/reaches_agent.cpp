// store/ reaches the agents through wire/ only: check_layers rejects this one.
#include "agent/pipeline.hpp"
#include "wire/record.hpp"
