#include "controller/cli/cli.hpp"

int main(int argc, char** argv) { return tracr::controller::tracrctl_main(argc, argv); }
