#pragma once
// The message of an InvalidArgument Error, for tests that compare error text against the expected line.
#include <gtest/gtest.h>

#include <string>

#include "collbench/error.h"

namespace collbench::testing {

/// The message of the Error `f` throws, which must be Errc::InvalidArgument ("" and a failure if it throws none).
template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace collbench::testing
