// A second thread that shares the fused pass with the stream's thread (MKL runs one thread then): the weight
// gradients (dY.T X: nothing later in the pass reads them), posted whole, and one half of each large product
// and of the scan (split2, step.cpp's mm2), joined before the result is read.
//
// Work sharing, not hand-off: the helper takes a posted task only when it gets to run, and whatever it has
// not taken when the stream's thread needs it (a join, the end of the pass), that thread runs itself. So a helper the
// scheduler keeps off the CPU (a busy machine, two jobs on two cores) costs the posts, never a wait for it.
// (A plain queue that the stream's thread waited on lost 14 % on a loaded machine.) Each task is the same
// work with the same operands whichever thread runs it, and MKL's results do not depend on the calling
// thread (one MKL thread, MKL_CBWR=AUTO,STRICT): the weights stay bit-identical to the pure step's.
#pragma once

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace tcg {

class Helper {
 public:
  static constexpr int kTasks = 32;

  Helper() : owner_(getpid()) {
    for (auto& st : state_) st.store(kDone);
    worker_ = std::thread([this] { loop(); });
    worker_.detach();  // lives as long as the process (one per stream thread that asked for it)
  }

  // a task the helper may take (at most kTasks per pass; more run at once); its slot, or -1 where it ran here
  int post(std::function<void()> fn) {
    if (n_ == kTasks || getpid() != owner_) {  // a forked child has no helper thread: run it here
      fn();
      return -1;
    }
    int i = n_++;
    fns_[i] = std::move(fn);
    state_[i].store(kFree, std::memory_order_release);
    {
      std::lock_guard<std::mutex> g(mu_);
      posted_ = n_;
    }
    cv_.notify_one();
    return i;
  }

  // task `i` done: run here if the helper has not taken it, else wait for the helper to finish it
  void join(int i) {
    if (i < 0) return;
    take(i);
    while (state_[i].load(std::memory_order_acquire) != kDone) std::this_thread::yield();
  }

  // the end of the pass: run what the helper has not taken, wait for what it has
  void finish() {
    if (n_ == 0) return;  // nothing posted (or a forked child, where post ran everything)
    for (int i = 0; i < n_; ++i) take(i);
    for (int i = 0; i < n_; ++i)
      while (state_[i].load(std::memory_order_acquire) != kDone) std::this_thread::yield();
    {
      std::lock_guard<std::mutex> g(mu_);
      posted_ = 0;
      ++round_;
    }
    n_ = 0;
  }

 private:
  enum { kFree = 0, kTaken = 1, kDone = 2 };

  void take(int i) {
    int free = kFree;
    if (state_[i].compare_exchange_strong(free, kTaken)) {  // acquire: fns_[i] was written before kFree
      fns_[i]();
      state_[i].store(kDone, std::memory_order_release);
    }
  }

  void loop() {
    int seen = 0;
    long round = 0;
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      cv_.wait(g, [&] { return round_ != round || posted_ > seen; });
      if (round_ != round) {  // a new pass: its tasks start again at 0
        round = round_;
        seen = 0;
      }
      int upto = posted_;
      g.unlock();
      for (; seen < upto; ++seen) take(seen);
      g.lock();
    }
  }

  const pid_t owner_;
  std::function<void()> fns_[kTasks];
  std::atomic<int> state_[kTasks];
  int n_ = 0;  // posted this pass (the stream's thread only)
  std::mutex mu_;
  std::condition_variable cv_;
  int posted_ = 0;  // under mu_
  long round_ = 0;  // under mu_
  std::thread worker_;
};

// fn(lo, hi) over [0, n) on two threads: the upper half posted to the helper, the lower one run here, then
// joined (here too when the helper has not taken it); with no helper, fn(0, n)
template <class F>
void split2(Helper* h, int n, F fn) {
  if (h == nullptr || n < 2) {
    fn(0, n);
    return;
  }
  int mid = n / 2;
  int i = h->post([=] { fn(mid, n); });
  fn(0, mid);
  h->join(i);
}

}  // namespace tcg
