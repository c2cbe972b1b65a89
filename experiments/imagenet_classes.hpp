// The ImageNet-1000 class names (experiments/imagenet_classes.txt, compiled
// in by CMake so a deployed agent needs no file beside it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tracr::experiments {

// The 1000 names in class-index order (torchvision's _IMAGENET_CATEGORIES).
const std::vector<std::string>& imagenet_class_names();

// The names to print for a classifier with `width` outputs: the dataset's
// when it has exactly `width` of them, else the ImageNet names when
// width == 1000, else none (predictions then show the class index). A
// reference to one of those (no copy per frame): `dataset_names`, the
// compiled-in list, or an empty list that lives as long as the program.
const std::vector<std::string>& class_names_for(int64_t width, const std::vector<std::string>& dataset_names);

}  // namespace tracr::experiments
