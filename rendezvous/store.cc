// The rendezvous store: frame codec, the chief's poll(2) server, and the client every process uses.
#include "store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <thread>

#include "collbench/error.h"

namespace collbench::host {
namespace {

using Clock = std::chrono::steady_clock;

/// Bytes read per recv(2) call by the server.
constexpr std::size_t kReadChunkBytes = 64 * 1024;
/// The largest frame the parser can accept; more buffered input than this while a request waits is abuse.
constexpr std::size_t kMaxRequestFrameBytes =
    kStoreRequestHeaderBytes + kMaxStoreTokenBytes + kMaxStoreKeyBytes + kMaxStoreValueBytes;
/// Pause between connection attempts while the server is not up yet.
constexpr auto kConnectRetryPause = std::chrono::milliseconds(50);
/// A reply to Get/Wait comes when the server's own deadline passes; allow this much more for the network.
constexpr auto kReplyGrace = std::chrono::seconds(5);
/// recv(2) calls per connection per poll wake-up.
constexpr int kReadChunksPerWake = 16;
/// Upper bound of one poll(2) sleep in the server, so stop requests and deadlines are seen promptly.
constexpr int kServerPollMs = 200;

void putU16(std::vector<std::byte>& out, std::uint16_t v) {
  out.push_back(static_cast<std::byte>(v & 0xff));
  out.push_back(static_cast<std::byte>(v >> 8));
}
void putU32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
void putBytes(std::vector<std::byte>& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}
std::uint16_t getU16(std::span<const std::byte> d, std::size_t at) {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(d[at]) | (std::to_integer<unsigned>(d[at + 1]) << 8));
}
std::uint32_t getU32(std::span<const std::byte> d, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::to_integer<std::uint32_t>(d[at + static_cast<std::size_t>(i)]) << (8 * i);
  return v;
}

/// A prefix of `magic` (little-endian) matches the bytes we have: lets garbage be refused on its first bytes.
bool magicPrefixMatches(std::span<const std::byte> d, std::uint32_t magic) {
  for (std::size_t i = 0; i < std::min<std::size_t>(4, d.size()); ++i) {
    if (std::to_integer<std::uint32_t>(d[i]) != ((magic >> (8 * i)) & 0xff)) return false;
  }
  return true;
}

/// Resolves host:port to socket addresses (numeric or name; no wildcard: we never bind to all interfaces).
addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    throw Error(Errc::InvalidArgument, fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc)));
  }
  return res;
}

std::string peerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST] = {}, serv[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return fmt::format("{}:{}", host, serv);
}

void setNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string hexPrefix(std::span<const std::byte> d) {
  std::string s;
  for (std::size_t i = 0; i < std::min<std::size_t>(8, d.size()); ++i) {
    s += fmt::format("{:02x}", std::to_integer<unsigned>(d[i]));
  }
  return s;
}

}  // namespace

std::string_view toString(StoreStatus s) {
  switch (s) {
    case StoreStatus::Ok:
      return "ok";
    case StoreStatus::Timeout:
      return "timeout";
    case StoreStatus::BadFrame:
      return "bad frame";
    case StoreStatus::BadVersion:
      return "bad protocol version";
    case StoreStatus::BadToken:
      return "wrong cluster token";
    case StoreStatus::Full:
      return "store full";
  }
  return "?";
}

std::vector<std::byte> encodeRequest(const StoreRequest& r) { return encodeRequest(r, kStoreProtocolVersion); }

std::vector<std::byte> encodeRequest(const StoreRequest& r, std::uint16_t version) {
  if (r.token.size() > kMaxStoreTokenBytes || r.key.empty() || r.key.size() > kMaxStoreKeyBytes ||
      r.value.size() > kMaxStoreValueBytes) {
    throw Error(Errc::InvalidArgument,
                fmt::format("store request out of limits: token {} B (max {}), key {} B (1..{}), value {} B (max {})",
                            r.token.size(), kMaxStoreTokenBytes, r.key.size(), kMaxStoreKeyBytes, r.value.size(),
                            kMaxStoreValueBytes));
  }
  std::vector<std::byte> out;
  out.reserve(kStoreRequestHeaderBytes + r.token.size() + r.key.size() + r.value.size());
  putU32(out, kStoreRequestMagic);
  putU16(out, version);
  out.push_back(static_cast<std::byte>(r.op));
  out.push_back(std::byte{0});
  putU16(out, static_cast<std::uint16_t>(r.token.size()));
  putU16(out, static_cast<std::uint16_t>(r.key.size()));
  putU32(out, static_cast<std::uint32_t>(r.value.size()));
  putU32(out, r.timeoutMs);
  putBytes(out, r.token.data(), r.token.size());
  putBytes(out, r.key.data(), r.key.size());
  putBytes(out, r.value.data(), r.value.size());
  return out;
}

StoreParse parseRequest(std::span<const std::byte> d) {
  StoreParse p;
  auto bad = [&](StoreStatus st, std::string why) {
    p.kind = StoreParse::Kind::Bad;
    p.status = st;
    p.reason = std::move(why);
    return p;
  };
  if (!magicPrefixMatches(d, kStoreRequestMagic)) {
    return bad(StoreStatus::BadFrame, fmt::format("not a collbench store frame (first bytes {})", hexPrefix(d)));
  }
  if (d.size() < 6) return p;
  const std::uint16_t version = getU16(d, 4);
  if (version != kStoreProtocolVersion) {
    return bad(StoreStatus::BadVersion,
               fmt::format("protocol version {}, this store speaks version {}", version, kStoreProtocolVersion));
  }
  if (d.size() < kStoreRequestHeaderBytes) return p;
  const auto op = std::to_integer<unsigned>(d[6]);
  if (op < static_cast<unsigned>(StoreOp::Set) || op > static_cast<unsigned>(StoreOp::Wait)) {
    return bad(StoreStatus::BadFrame, fmt::format("unknown op {}", op));
  }
  if (d[7] != std::byte{0}) return bad(StoreStatus::BadFrame, "reserved header byte is not zero");
  const std::size_t tokenLen = getU16(d, 8), keyLen = getU16(d, 10), valueLen = getU32(d, 12);
  if (tokenLen > kMaxStoreTokenBytes) {
    return bad(StoreStatus::BadFrame, fmt::format("token length {} exceeds {}", tokenLen, kMaxStoreTokenBytes));
  }
  if (keyLen == 0 || keyLen > kMaxStoreKeyBytes) {
    return bad(StoreStatus::BadFrame, fmt::format("key length {} is not in 1..{}", keyLen, kMaxStoreKeyBytes));
  }
  if (valueLen > kMaxStoreValueBytes) {
    return bad(StoreStatus::BadFrame, fmt::format("value length {} exceeds {}", valueLen, kMaxStoreValueBytes));
  }
  if (op != static_cast<unsigned>(StoreOp::Set) && valueLen != 0) {
    return bad(StoreStatus::BadFrame, fmt::format("op {} carries a {}-byte value", op, valueLen));
  }
  const std::size_t total = kStoreRequestHeaderBytes + tokenLen + keyLen + valueLen;
  if (d.size() < total) return p;
  p.kind = StoreParse::Kind::Ok;
  p.consumed = total;
  p.request.op = static_cast<StoreOp>(op);
  p.request.timeoutMs = getU32(d, 16);
  const char* base = reinterpret_cast<const char*>(d.data());
  std::size_t at = kStoreRequestHeaderBytes;
  p.request.token.assign(base + at, tokenLen);
  at += tokenLen;
  p.request.key.assign(base + at, keyLen);
  at += keyLen;
  p.request.value.assign(base + at, base + at + valueLen);
  return p;
}

std::vector<std::byte> encodeReply(StoreStatus status, std::span<const char> payload) {
  std::vector<std::byte> out;
  out.reserve(kStoreReplyHeaderBytes + payload.size());
  putU32(out, kStoreReplyMagic);
  putU16(out, kStoreProtocolVersion);
  out.push_back(static_cast<std::byte>(status));
  out.push_back(std::byte{0});
  putU32(out, static_cast<std::uint32_t>(payload.size()));
  putBytes(out, payload.data(), payload.size());
  return out;
}

StoreReplyParse parseReply(std::span<const std::byte> d) {
  StoreReplyParse p;
  auto bad = [&](std::string why) {
    p.kind = StoreReplyParse::Kind::Bad;
    p.reason = std::move(why);
    return p;
  };
  if (!magicPrefixMatches(d, kStoreReplyMagic)) {
    return bad(fmt::format("not a collbench store reply (first bytes {})", hexPrefix(d)));
  }
  if (d.size() < kStoreReplyHeaderBytes) return p;
  const std::uint16_t version = getU16(d, 4);
  if (version != kStoreProtocolVersion) {
    return bad(
        fmt::format("store replied with protocol version {}, this process speaks {}", version, kStoreProtocolVersion));
  }
  const auto status = std::to_integer<unsigned>(d[6]);
  if (status > static_cast<unsigned>(StoreStatus::Full)) return bad(fmt::format("unknown reply status {}", status));
  const std::size_t len = getU32(d, 8);
  if (len > kMaxStoreValueBytes) return bad(fmt::format("reply payload {} B exceeds {}", len, kMaxStoreValueBytes));
  if (d.size() < kStoreReplyHeaderBytes + len) return p;
  p.kind = StoreReplyParse::Kind::Ok;
  p.status = static_cast<StoreStatus>(status);
  p.consumed = kStoreReplyHeaderBytes + len;
  const char* base = reinterpret_cast<const char*>(d.data()) + kStoreReplyHeaderBytes;
  p.payload.assign(base, base + len);
  return p;
}

bool constantTimeEquals(std::string_view a, std::string_view b) {
  // Compare over the longer length so that neither the position of the first difference nor (much of) the
  // length leaks through timing.
  const std::size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned ca = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    const unsigned cb = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= ca ^ cb;
  }
  return diff == 0;
}

// ---------------------------------------------------------------------------------------------------------------
// Server

struct StoreServer::Impl {
  struct Pending {
    StoreOp op;
    std::string key;
    Clock::time_point deadline;
  };
  struct Conn {
    int fd = -1;
    std::string peer;
    std::vector<std::byte> in;
    std::vector<std::byte> out;
    std::size_t outOff = 0;
    bool closeAfterWrite = false;
    bool dead = false;
    std::optional<Clock::time_point> partialSince;
    std::optional<Pending> pending;
  };

  std::string token;
  std::string address;
  std::chrono::milliseconds partialTimeout;
  int listenFd = -1;
  int port = 0;
  int wakeRead = -1, wakeWrite = -1;
  std::atomic<bool> stop{false};
  std::thread thread;
  mutable std::mutex statsMutex;
  StoreServerStats stats;
  std::map<std::string, std::vector<char>, std::less<>> data;
  std::size_t storedBytes = 0;
  std::list<Conn> conns;

  void refuse(Conn& c, StoreStatus st, const std::string& reason) {
    spdlog::warn("collbench store {}: refused {}: {}", address, c.peer, reason);
    {
      std::lock_guard lock(statsMutex);
      if (st == StoreStatus::BadToken)
        ++stats.refusedToken;
      else if (st == StoreStatus::BadVersion)
        ++stats.refusedVersion;
      else
        ++stats.refusedFrame;
    }
    c.closeAfterWrite = true;  // before the reply: a reply that leaves at once closes the connection
    c.in.clear();
    c.partialSince.reset();
    reply(c, st, std::span<const char>(reason.data(), reason.size()));
  }

  void reply(Conn& c, StoreStatus st, std::span<const char> payload) {
    const auto frame = encodeReply(st, payload);
    c.out.insert(c.out.end(), frame.begin(), frame.end());
    flush(c);
  }

  void flush(Conn& c) {
    while (c.outOff < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.outOff, c.out.size() - c.outOff, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        c.dead = true;
        return;
      }
      c.outOff += static_cast<std::size_t>(n);
    }
    c.out.clear();
    c.outOff = 0;
    if (c.closeAfterWrite) c.dead = true;
  }

  void answerPending(Conn& c) {
    const Pending p = *c.pending;
    auto it = data.find(p.key);
    if (it == data.end()) return;
    c.pending.reset();
    if (p.op == StoreOp::Get) {
      reply(c, StoreStatus::Ok, std::span<const char>(it->second.data(), it->second.size()));
    } else {
      reply(c, StoreStatus::Ok, {});
    }
  }

  /// Parses and serves whole frames in `c.in` until one waits, the input runs out, or the connection is refused.
  void process(Conn& c, Clock::time_point now) {
    while (!c.pending && !c.closeAfterWrite && !c.dead) {
      if (c.in.empty()) {
        c.partialSince.reset();
        return;
      }
      StoreParse p = parseRequest(c.in);
      if (p.kind == StoreParse::Kind::NeedMore) {
        if (!c.partialSince) c.partialSince = now;
        return;
      }
      if (p.kind == StoreParse::Kind::Bad) {
        refuse(c, p.status, p.reason);
        return;
      }
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(p.consumed));
      c.partialSince.reset();
      if (!constantTimeEquals(p.request.token, token)) {
        refuse(c, StoreStatus::BadToken, "wrong cluster token (check COLLBENCH_CLUSTER_TOKEN on every task)");
        return;
      }
      {
        std::lock_guard lock(statsMutex);
        ++stats.requests;
      }
      StoreRequest& r = p.request;
      switch (r.op) {
        case StoreOp::Set: {
          auto it = data.find(r.key);
          const std::size_t old = it == data.end() ? 0 : it->second.size();
          if (storedBytes - old + r.value.size() > kMaxStoredBytes) {
            const std::string why =
                fmt::format("store holds {} B; setting '{}' would exceed {} B", storedBytes, r.key, kMaxStoredBytes);
            spdlog::warn("collbench store {}: {} ({})", address, why, c.peer);
            reply(c, StoreStatus::Full, std::span<const char>(why.data(), why.size()));
            break;
          }
          storedBytes = storedBytes - old + r.value.size();
          const std::string key = r.key;
          data[key] = std::move(r.value);
          reply(c, StoreStatus::Ok, {});
          for (Conn& other : conns) {
            if (other.pending && other.pending->key == key && !other.dead) answerPending(other);
          }
          break;
        }
        case StoreOp::Get:
        case StoreOp::Wait:
          c.pending = Pending{r.op, r.key, now + std::chrono::milliseconds(r.timeoutMs)};
          answerPending(c);
          break;
      }
    }
  }

  void acceptAll() {
    for (;;) {
      const int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a transient error: poll will tell us again
      if (conns.size() >= kMaxConnections) {
        spdlog::warn("collbench store {}: refused {}: {} connections already open", address, peerName(fd),
                     kMaxConnections);
        ::close(fd);
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Conn c;
      c.fd = fd;
      c.peer = peerName(fd);
      conns.push_back(std::move(c));
      std::lock_guard lock(statsMutex);
      ++stats.accepted;
    }
  }

  void readFrom(Conn& c, Clock::time_point now) {
    std::byte buf[kReadChunkBytes];
    // Bounded per wake-up so that one fast sender cannot starve the other connections.
    for (int chunk = 0; chunk < kReadChunksPerWake && !c.dead && !c.closeAfterWrite; ++chunk) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
        break;
      }
      if (n == 0) {
        if (!c.in.empty() && !c.closeAfterWrite) {
          spdlog::warn("collbench store {}: refused {}: connection closed inside a frame ({} bytes of it arrived)",
                       address, c.peer, c.in.size());
          std::lock_guard lock(statsMutex);
          ++stats.refusedFrame;
        }
        c.dead = true;
        break;
      }
      c.in.insert(c.in.end(), buf, buf + n);
      if (c.in.size() > kMaxRequestFrameBytes) {
        refuse(c, StoreStatus::BadFrame,
               fmt::format("more than {} B sent ahead of a pending reply", kMaxRequestFrameBytes));
        break;
      }
      process(c, now);
    }
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<Conn*> order;
    while (!stop.load()) {
      fds.clear();
      order.clear();
      fds.push_back({listenFd, POLLIN, 0});
      fds.push_back({wakeRead, POLLIN, 0});
      auto now = Clock::now();
      auto nextDeadline = now + std::chrono::milliseconds(kServerPollMs);
      for (Conn& c : conns) {
        short ev = POLLIN;
        if (!c.out.empty()) ev |= POLLOUT;
        fds.push_back({c.fd, ev, 0});
        order.push_back(&c);
        if (c.pending) nextDeadline = std::min(nextDeadline, c.pending->deadline);
        if (c.partialSince) nextDeadline = std::min(nextDeadline, *c.partialSince + partialTimeout);
      }
      const auto waitMs = std::chrono::duration_cast<std::chrono::milliseconds>(nextDeadline - now).count();
      const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(0, waitMs) + 1));
      if (rc < 0 && errno != EINTR) {
        spdlog::error("collbench store {}: poll failed: {}", address, errnoText(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      now = Clock::now();
      if (fds[1].revents & POLLIN) {
        char drain[64];
        while (::read(wakeRead, drain, sizeof drain) > 0) {
        }
      }
      for (std::size_t i = 0; i < order.size(); ++i) {
        Conn& c = *order[i];
        const short re = fds[i + 2].revents;
        if (re & POLLIN) readFrom(c, now);
        if ((re & POLLOUT) && !c.dead) flush(c);
        if ((re & (POLLERR | POLLNVAL)) || ((re & POLLHUP) && !(re & POLLIN))) c.dead = true;
      }
      if (fds[0].revents & POLLIN) acceptAll();
      for (Conn& c : conns) {
        if (c.dead) continue;
        if (c.pending && now >= c.pending->deadline) {
          c.pending.reset();
          reply(c, StoreStatus::Timeout, {});
          process(c, now);
        }
        if (c.partialSince && now - *c.partialSince >= partialTimeout && !c.closeAfterWrite) {
          refuse(c, StoreStatus::BadFrame,
                 fmt::format("truncated frame: {} bytes, then nothing for {} ms", c.in.size(), partialTimeout.count()));
        }
      }
      for (auto it = conns.begin(); it != conns.end();) {
        if (it->dead) {
          ::close(it->fd);
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Conn& c : conns) ::close(c.fd);
    conns.clear();
  }
};

StoreServer::StoreServer(const std::string& host, int port, std::string token,
                         std::chrono::milliseconds partialFrameTimeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->token = std::move(token);
  impl_->partialTimeout = partialFrameTimeout;
  if (host.empty()) {
    throw Error(Errc::InvalidArgument, "store server needs a host to bind to (it never listens on all interfaces)");
  }
  addrinfo* res = resolve(host, port, true);
  std::string lastError = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      lastError = errnoText(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      impl_->listenFd = fd;
      break;
    }
    lastError = errnoText(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (impl_->listenFd < 0) {
    throw Error(Errc::BackendError, fmt::format("store server cannot listen on {}:{}: {}", host, port, lastError));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(impl_->listenFd, reinterpret_cast<sockaddr*>(&ss), &len);
  impl_->port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  impl_->address = fmt::format("{}:{}", host, impl_->port);
  int pipeFds[2];
  if (::pipe2(pipeFds, O_NONBLOCK | O_CLOEXEC) != 0) {
    ::close(impl_->listenFd);
    throw Error(Errc::BackendError, fmt::format("store server: pipe: {}", errnoText(errno)));
  }
  impl_->wakeRead = pipeFds[0];
  impl_->wakeWrite = pipeFds[1];
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

StoreServer::~StoreServer() {
  impl_->stop.store(true);
  const char c = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wakeWrite, &c, 1);
  impl_->thread.join();
  ::close(impl_->listenFd);
  ::close(impl_->wakeRead);
  ::close(impl_->wakeWrite);
}

int StoreServer::port() const { return impl_->port; }

StoreServerStats StoreServer::stats() const {
  std::lock_guard lock(impl_->statsMutex);
  return impl_->stats;
}

// ---------------------------------------------------------------------------------------------------------------
// Client

StoreClient::StoreClient(std::string host, int port, std::string token, std::chrono::milliseconds connectTimeout)
    : host_(std::move(host)), port_(port), token_(std::move(token)), address_(fmt::format("{}:{}", host_, port_)) {
  const auto deadline = Clock::now() + connectTimeout;
  std::string lastError;
  for (;;) {
    addrinfo* res = resolve(host_, port_, false);
    for (addrinfo* ai = res; ai && fd_ < 0; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        lastError = errnoText(errno);
        continue;
      }
      setNonBlocking(fd);
      int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd pfd{fd, POLLOUT, 0};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (::poll(&pfd, 1, static_cast<int>(std::max<long long>(1, left))) == 1) {
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        } else {
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
      } else {
        lastError = errnoText(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    if (fd_ >= 0) return;
    if (Clock::now() + kConnectRetryPause >= deadline) break;
    std::this_thread::sleep_for(kConnectRetryPause);
  }
  throw Error(Errc::Timeout,
              fmt::format("the rendezvous store at {} did not answer within {:.3g} s ({}); is the chief running?",
                          address_, std::chrono::duration<double>(connectTimeout).count(), lastError));
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

StoreReplyParse StoreClient::roundTrip(const StoreRequest& r, std::chrono::milliseconds replyWithin) {
  std::lock_guard lock(mutex_);
  if (fd_ < 0) {
    throw Error(Errc::PeerFailure, fmt::format("the connection to the rendezvous store at {} is closed", address_));
  }
  const auto frame = encodeRequest(r);
  const auto deadline = Clock::now() + replyWithin + kReplyGrace;
  auto lost = [&](const std::string& why) {
    ::close(fd_);
    fd_ = -1;
    return Error(Errc::PeerFailure, fmt::format("lost the rendezvous store at {}: {}", address_, why));
  };
  auto waitFor = [&](short ev) {
    pollfd pfd{fd_, ev, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || ::poll(&pfd, 1, static_cast<int>(left)) <= 0) throw lost("no reply in time");
  };
  for (std::size_t off = 0; off < frame.size();) {
    const ssize_t n = ::send(fd_, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        waitFor(POLLOUT);
        continue;
      }
      throw lost(errnoText(errno));
    }
    off += static_cast<std::size_t>(n);
  }
  std::vector<std::byte> in;
  std::byte buf[kReadChunkBytes];
  for (;;) {
    StoreReplyParse p = parseReply(in);
    if (p.kind == StoreReplyParse::Kind::Bad) throw lost(p.reason);
    if (p.kind == StoreReplyParse::Kind::Ok) {
      if (p.status == StoreStatus::BadToken || p.status == StoreStatus::BadVersion ||
          p.status == StoreStatus::BadFrame) {
        ::close(fd_);
        fd_ = -1;
        throw Error(Errc::InvalidArgument,
                    fmt::format("the rendezvous store at {} refused this process ({}): {}", address_,
                                toString(p.status), std::string(p.payload.begin(), p.payload.end())));
      }
      if (p.status == StoreStatus::Full) {
        throw Error(Errc::BackendError, fmt::format("the rendezvous store at {}: {}", address_,
                                                    std::string(p.payload.begin(), p.payload.end())));
      }
      return p;
    }
    waitFor(POLLIN);
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) throw lost(n == 0 ? "connection closed" : errnoText(errno));
    in.insert(in.end(), buf, buf + n);
  }
}

void StoreClient::set(const std::string& key, const std::vector<char>& value) {
  StoreRequest r;
  r.op = StoreOp::Set;
  r.token = token_;
  r.key = key;
  r.value = value;
  roundTrip(r, std::chrono::milliseconds(0));
}

std::optional<std::vector<char>> StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  StoreRequest r;
  r.op = StoreOp::Get;
  r.token = token_;
  r.key = key;
  r.timeoutMs = static_cast<std::uint32_t>(std::clamp<long long>(timeout.count(), 0, UINT32_MAX));
  StoreReplyParse p = roundTrip(r, timeout);
  if (p.status != StoreStatus::Ok) return std::nullopt;
  return std::move(p.payload);
}

bool StoreClient::wait(const std::string& key, std::chrono::milliseconds timeout) {
  StoreRequest r;
  r.op = StoreOp::Wait;
  r.token = token_;
  r.key = key;
  r.timeoutMs = static_cast<std::uint32_t>(std::clamp<long long>(timeout.count(), 0, UINT32_MAX));
  return roundTrip(r, timeout).status == StoreStatus::Ok;
}

}  // namespace collbench::host
