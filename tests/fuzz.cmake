# libFuzzer harnesses of the .npy reader, case.json and whole case folders (tests/fuzz/README.md):
# built only with -DFLASHLAB_FUZZ=ON, by clang, in a sanitized build; `ctest -L fuzz`.
add_subdirectory(fuzz)
