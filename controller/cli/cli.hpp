#pragma once
namespace tracr::controller {
// Entry point of tracrctl: the one top-level catch turning errors into a
// message and an exit code.
int tracrctl_main(int argc, char** argv);
}  // namespace tracr::controller
