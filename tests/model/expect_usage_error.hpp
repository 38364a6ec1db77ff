#pragma once
// fn() must throw cmfx::usage_error whose message contains `what` (the key, tensor or option it names).
#include <gtest/gtest.h>

#include <string>

#include "cmfx/core/error.hpp"

template <class Fn>
void expect_usage_error_naming(Fn&& fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no usage_error for " << what;
  } catch (const cmfx::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}
