// Where the commands that read results find the database when --db is not
// given, so that they agree with `tracrctl run`, which writes where the
// experiment's `output:` says, relative to the experiment file (the shipped
// experiments write the project's results/tracr.db from any directory).
#pragma once

#include <string>

namespace tracr::store {

// $TRACR_OUTPUT when set; else results/tracr.db under the current directory
// when it exists; else the project's results/tracr.db (this build's source
// tree) when it exists; else results/tracr.db (opening it then fails with an
// error naming it).
std::string default_results_db();

}  // namespace tracr::store
