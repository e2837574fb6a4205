// The Catch2 entry point shared by all unit-test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
