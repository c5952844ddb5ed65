// The store adapter: Gloo's rendezvous::Store interface over collbench's TCP rendezvous store (rendezvous/store.h)
// or Gloo's file store, so that Gloo's full-mesh connection finds every rank's address.
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/store.h>

#include <algorithm>
#include <filesystem>

#include "gloo_internal.h"

namespace collbench::host::gloo_impl {

namespace {

/// Our TCP store or Gloo's file store, with keys scoped to this cluster and timeouts turned into errors that name the
/// task that did not arrive.
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  RendezvousStore(const ProcessWorld& w, Ms timeout) : world_(w), timeout_(timeout) {
    prefix_ = fmt::format("collbench-{:016x}-", Hello::digest(w.token));
    if (w.store == "tcp") {
      const auto [host, port] = splitHostPort(w.master);
      try {
        tcp_ = std::make_unique<StoreClient>(host, port, w.token, timeout);
      } catch (const Error& e) {
        if (e.code() != Errc::Timeout) throw;
        throw Error(Errc::Timeout,
                    fmt::format("rendezvous: {}, which serves the store at {}, did not answer within {:.3g} s ({} "
                                "waited for it)",
                                w.describeRank(0), w.master, seconds(timeout), w.describeRank(w.rank)),
                    w.rank, 0);
      }
      kind_ = fmt::format("TCP store at {}", w.master);
    } else {
      const std::string dir = w.store.substr(5);
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      file_ = std::make_unique<gloo::rendezvous::FileStore>(dir);
      kind_ = fmt::format("file store in {}", dir);
    }
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    if (tcp_) {
      tcp_->set(prefix_ + key, data);
      return;
    }
    try {
      file_->set(prefix_ + key, data);
    } catch (const std::exception& e) {
      const std::string what = glooWhat(e);
      if (what.find("File already exists") != std::string::npos) {
        // Keys are scoped by the cluster token, so an earlier run with the same token (a derived one: same addresses)
        // left them; other ranks may read its stale addresses, so stop here.
        throw Error(
            Errc::InvalidArgument,
            fmt::format("rendezvous: the {} already holds '{}' of this cluster from an earlier run with the same "
                        "cluster token; give each job a fresh directory (COLLBENCH_STORE=file:<new dir>), empty "
                        "this one, or set {} to a value unique to the run (collbench launch does)",
                        kind_, key, kClusterTokenEnv),
            world_.rank);
      }
      throw Error(Errc::InvalidArgument,
                  fmt::format("rendezvous: cannot publish '{}' in the {}: {} (use a fresh directory per job)", key,
                              kind_, what),
                  world_.rank);
    }
  }

  std::vector<char> get(const std::string& key) override {
    if (tcp_) {
      auto v = tcp_->get(prefix_ + key, timeout_);
      if (!v) missing(key);
      return std::move(*v);
    }
    waitOne(key, timeout_);
    return file_->get(prefix_ + key);
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const Ms& timeout) override {
    const auto deadline = Clock::now() + std::min(timeout, timeout_);
    for (const auto& k : keys) waitOne(k, std::max(Ms(1), std::chrono::duration_cast<Ms>(deadline - Clock::now())));
  }

 private:
  static double seconds(Ms m) { return std::chrono::duration<double>(m).count(); }

  void waitOne(const std::string& key, Ms timeout) {
    if (tcp_) {
      if (!tcp_->wait(prefix_ + key, timeout)) missing(key);
      return;
    }
    try {
      file_->wait({prefix_ + key}, timeout);
    } catch (const gloo::IoException&) {
      missing(key);
    }
  }

  /// Gloo's keys are "rank_<i>" (host names) and "<i>" (transport addresses) of rank i.
  [[noreturn]] void missing(const std::string& key) {
    int r = -1;
    const std::string digits = key.rfind("rank_", 0) == 0 ? key.substr(5) : key;
    if (!digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      r = std::stoi(digits);
    }
    throw Error(Errc::Timeout,
                fmt::format("rendezvous: {} did not join within {:.3g} s ({} waited for it at the {})",
                            world_.describeRank(r), seconds(timeout_), world_.describeRank(world_.rank), kind_),
                world_.rank, r);
  }

  const ProcessWorld& world_;
  Ms timeout_;
  std::string prefix_;
  std::string kind_;
  std::unique_ptr<StoreClient> tcp_;
  std::unique_ptr<gloo::rendezvous::FileStore> file_;
};

}  // namespace

void connectFullMesh(gloo::rendezvous::Context& context, std::shared_ptr<gloo::transport::Device>& device,
                     const ProcessWorld& world, Ms timeout) {
  RendezvousStore store(world, timeout);
  context.connectFullMesh(store, device);
}

}  // namespace collbench::host::gloo_impl
