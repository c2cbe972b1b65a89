#include "agent/agent.hpp"

int main(int argc, char** argv) { return tracr::agent::agent_main(argc, argv); }
