// c10d logs every failed connection attempt of a rendezvous, and every failed store operation, at ERROR level with a
// C++ stack trace; tune reports such a failure once, in its own words. While a QuietC10Logs lives, c10's log level is
// raised to FATAL; the previous level comes back when it goes.
#pragma once

#include <c10/util/Logging.h>

namespace tune::distributed {

class QuietC10Logs {
 public:
  QuietC10Logs() : saved_(FLAGS_caffe2_log_level) { FLAGS_caffe2_log_level = 3; }
  ~QuietC10Logs() { FLAGS_caffe2_log_level = saved_; }
  QuietC10Logs(const QuietC10Logs&) = delete;
  QuietC10Logs& operator=(const QuietC10Logs&) = delete;

 private:
  int saved_;
};

}  // namespace tune::distributed
