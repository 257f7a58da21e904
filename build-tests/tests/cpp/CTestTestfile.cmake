# CMake generated Testfile for 
# Source directory: /work/main/tests/cpp
# Build directory: /work/main/build-tests/tests/cpp
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/main/build-tests/tests/cpp/tpu_core_tests_4fba942f_include.cmake")
