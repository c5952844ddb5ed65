// The rendezvous store's wire protocol and server: round trips, refusals (wrong token, wrong version, garbage,
// truncated frames) with the server serving others throughout, a bounded seeded fuzz of the parser and of a live
// server, and binding only to the given address.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "collbench/error.h"
#include "store.h"

namespace collbench::host {
namespace {

using namespace std::chrono_literals;

StoreRequest request(StoreOp op, std::string key, std::string value = "", std::string token = "secret",
                     std::uint32_t timeoutMs = 0) {
  StoreRequest r;
  r.op = op;
  r.key = std::move(key);
  r.value.assign(value.begin(), value.end());
  r.token = std::move(token);
  r.timeoutMs = timeoutMs;
  return r;
}

TEST(StoreProtocol, RoundTripEveryOp) {
  for (StoreOp op : {StoreOp::Set, StoreOp::Get, StoreOp::Wait}) {
    const StoreRequest r = request(op, "rank_3", op == StoreOp::Set ? "addr-bytes" : "", "tok", 1234);
    const auto frame = encodeRequest(r);
    const StoreParse p = parseRequest(frame);
    ASSERT_EQ(p.kind, StoreParse::Kind::Ok);
    EXPECT_EQ(p.consumed, frame.size());
    EXPECT_EQ(p.request.op, op);
    EXPECT_EQ(p.request.key, "rank_3");
    EXPECT_EQ(p.request.token, "tok");
    EXPECT_EQ(p.request.timeoutMs, 1234u);
    EXPECT_EQ(std::string(p.request.value.begin(), p.request.value.end()), op == StoreOp::Set ? "addr-bytes" : "");
  }
}

TEST(StoreProtocol, EveryPrefixOfAFrameNeedsMore) {
  const auto frame = encodeRequest(request(StoreOp::Set, "key", "value"));
  for (std::size_t n = 0; n < frame.size(); ++n) {
    EXPECT_EQ(parseRequest(std::span(frame.data(), n)).kind, StoreParse::Kind::NeedMore) << n;
  }
  // Two frames back to back: the first is consumed exactly.
  auto two = frame;
  two.insert(two.end(), frame.begin(), frame.end());
  const StoreParse p = parseRequest(two);
  ASSERT_EQ(p.kind, StoreParse::Kind::Ok);
  EXPECT_EQ(p.consumed, frame.size());
}

TEST(StoreProtocol, MalformedHeadersAreRefusedWithAReason) {
  const auto good = encodeRequest(request(StoreOp::Get, "k"));
  auto with = [&](std::size_t at, std::byte v) {
    auto f = good;
    f[at] = v;
    return parseRequest(f);
  };
  StoreParse p = with(0, std::byte{'X'});
  EXPECT_EQ(p.kind, StoreParse::Kind::Bad);
  EXPECT_NE(p.reason.find("not a collbench store frame"), std::string::npos) << p.reason;
  // Garbage is refused on its first byte, before a whole header has arrived.
  const std::byte junk[1] = {std::byte{0xff}};
  EXPECT_EQ(parseRequest(junk).kind, StoreParse::Kind::Bad);

  p = parseRequest(encodeRequest(request(StoreOp::Get, "k"), 7));
  EXPECT_EQ(p.kind, StoreParse::Kind::Bad);
  EXPECT_EQ(p.status, StoreStatus::BadVersion);
  EXPECT_NE(p.reason.find("protocol version 7"), std::string::npos) << p.reason;

  p = with(6, std::byte{9});
  EXPECT_EQ(p.kind, StoreParse::Kind::Bad);
  EXPECT_NE(p.reason.find("unknown op 9"), std::string::npos);
  p = with(7, std::byte{1});
  EXPECT_NE(p.reason.find("reserved"), std::string::npos);
  p = with(10, std::byte{0});  // key length 0 (low byte; the high byte is already 0)
  EXPECT_NE(p.reason.find("key length 0"), std::string::npos) << p.reason;
  p = with(9, std::byte{0xff});  // token length 0xff00
  EXPECT_NE(p.reason.find("token length"), std::string::npos) << p.reason;
  p = with(15, std::byte{0x7f});  // value length 0x7f000000 on a Get
  EXPECT_NE(p.reason.find("value length"), std::string::npos) << p.reason;
  auto get = encodeRequest(request(StoreOp::Get, "k"));
  get[12] = std::byte{4};  // a Get carrying 4 value bytes
  EXPECT_NE(parseRequest(get).reason.find("carries a 4-byte value"), std::string::npos);

  EXPECT_THROW(encodeRequest(request(StoreOp::Set, std::string(kMaxStoreKeyBytes + 1, 'k'))), Error);
  EXPECT_THROW(encodeRequest(request(StoreOp::Set, "")), Error);
}

TEST(StoreProtocol, ConstantTimeEquals) {
  EXPECT_TRUE(constantTimeEquals("abc", "abc"));
  EXPECT_FALSE(constantTimeEquals("abc", "abd"));
  EXPECT_FALSE(constantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(constantTimeEquals("", "a"));
  EXPECT_TRUE(constantTimeEquals("", ""));
}

/// Random bytes, bit-flipped valid frames and truncated valid frames: the parser must classify every one without
/// reading out of bounds (ASan/valgrind would see it) and never accept more than it was given or the limits.
TEST(StoreProtocol, SeededFuzzOfTheParser) {
  std::mt19937_64 rng(20240601);
  constexpr int kFrames = 10000;
  int ok = 0, bad = 0, more = 0;
  for (int i = 0; i < kFrames; ++i) {
    std::vector<std::byte> f;
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0) {
      f.resize(rng() % 64);
      for (auto& b : f) b = static_cast<std::byte>(rng());
    } else {
      const auto op = static_cast<StoreOp>(1 + rng() % 3);
      std::string value(op == StoreOp::Set ? rng() % 100 : 0, 'v');
      f = encodeRequest(request(op, std::string(1 + rng() % 40, 'k'), value, std::string(rng() % 40, 't')));
      if (kind == 1) {
        for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
          f[rng() % f.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
        }
      } else {
        f.resize(rng() % f.size());
      }
    }
    const StoreParse p = parseRequest(f);
    switch (p.kind) {
      case StoreParse::Kind::Ok:
        ++ok;
        ASSERT_LE(p.consumed, f.size());
        ASSERT_LE(p.request.key.size(), kMaxStoreKeyBytes);
        ASSERT_LE(p.request.token.size(), kMaxStoreTokenBytes);
        ASSERT_LE(p.request.value.size(), kMaxStoreValueBytes);
        break;
      case StoreParse::Kind::Bad:
        ++bad;
        ASSERT_FALSE(p.reason.empty());
        break;
      case StoreParse::Kind::NeedMore:
        ++more;
        break;
    }
    if (kind == 2) {
      ASSERT_NE(p.kind, StoreParse::Kind::Ok) << "a truncated frame was accepted";
    }
  }
  EXPECT_GT(bad, kFrames / 4);
  EXPECT_GT(more, kFrames / 10);
  EXPECT_GT(ok, 0);  // some bit flips hit the payload only
}

TEST(StoreProtocol, ReplyParser) {
  const std::string v = "value";
  const auto frame = encodeReply(StoreStatus::Ok, std::span<const char>(v.data(), v.size()));
  const StoreReplyParse p = parseReply(frame);
  ASSERT_EQ(p.kind, StoreReplyParse::Kind::Ok);
  EXPECT_EQ(std::string(p.payload.begin(), p.payload.end()), v);
  EXPECT_EQ(parseReply(std::span(frame.data(), frame.size() - 1)).kind, StoreReplyParse::Kind::NeedMore);
  auto bad = frame;
  bad[6] = std::byte{77};
  EXPECT_EQ(parseReply(bad).kind, StoreReplyParse::Kind::Bad);
}

// ---- live server ----

int rawConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void sendBytes(int fd, std::span<const std::byte> b) {
  ASSERT_EQ(::send(fd, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
}

/// Reads until the server closes (or `limit` passes); returns what arrived.
std::vector<std::byte> readUntilClosed(int fd, std::chrono::milliseconds limit = 3000ms) {
  std::vector<std::byte> got;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    std::byte buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.insert(got.end(), buf, buf + n);
  }
  return got;
}

class StoreServerTest : public ::testing::Test {
 protected:
  StoreServer server{"127.0.0.1", 0, "secret", 300ms};
  int port() const { return server.port(); }
  void expectStillServing() {
    StoreClient c("127.0.0.1", port(), "secret", 2s);
    const std::string key = "alive-" + std::to_string(probes_++);
    c.set(key, {'o', 'k'});
    auto v = c.get(key, 1s);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(std::string(v->begin(), v->end()), "ok");
  }
  int probes_ = 0;
};

TEST_F(StoreServerTest, SetGetWaitAndTimeouts) {
  StoreClient a("127.0.0.1", port(), "secret", 2s);
  StoreClient b("127.0.0.1", port(), "secret", 2s);
  a.set("x", {'1', '2'});
  auto v = b.get("x", 1s);
  ASSERT_TRUE(v);
  EXPECT_EQ(std::string(v->begin(), v->end()), "12");
  EXPECT_TRUE(b.wait("x", 0ms));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(b.get("missing", 200ms).has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 190ms);
  // A waiter is woken by another client's set.
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    a.set("later", {'z'});
  });
  EXPECT_TRUE(b.wait("later", 5s));
  setter.join();
  EXPECT_EQ(server.stats().refusedToken + server.stats().refusedFrame + server.stats().refusedVersion, 0u);
}

TEST_F(StoreServerTest, WrongTokenIsRefusedAndOthersAreServed) {
  StoreClient good("127.0.0.1", port(), "secret", 2s);
  good.set("k", {'v'});
  StoreClient bad("127.0.0.1", port(), "not-the-secret", 2s);
  try {
    bad.get("k", 100ms);
    FAIL() << "a wrong token was served";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("wrong cluster token"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server.stats().refusedToken, 1u);
  EXPECT_TRUE(good.get("k", 1s).has_value());
  expectStillServing();
}

TEST_F(StoreServerTest, WrongVersionIsRefusedWithAReply) {
  const int fd = rawConnect(port());
  ASSERT_GE(fd, 0);
  sendBytes(fd, encodeRequest(request(StoreOp::Get, "k"), kStoreProtocolVersion + 1));
  const auto reply = readUntilClosed(fd);
  ::close(fd);
  const StoreReplyParse p = parseReply(reply);
  ASSERT_EQ(p.kind, StoreReplyParse::Kind::Ok);
  EXPECT_EQ(p.status, StoreStatus::BadVersion);
  EXPECT_NE(std::string(p.payload.begin(), p.payload.end()).find("protocol version 2"), std::string::npos);
  EXPECT_EQ(server.stats().refusedVersion, 1u);
  expectStillServing();
}

TEST_F(StoreServerTest, GarbageAndTruncatedFramesAreDropped) {
  {
    const int fd = rawConnect(port());
    const std::byte junk[] = {std::byte{'G'}, std::byte{'E'}, std::byte{'T'}, std::byte{' '}, std::byte{'/'}};
    sendBytes(fd, junk);
    readUntilClosed(fd);  // the server closes it
    ::close(fd);
  }
  {
    // Half a frame, then the client goes away.
    const int fd = rawConnect(port());
    const auto f = encodeRequest(request(StoreOp::Set, "key", "value"));
    sendBytes(fd, std::span(f.data(), f.size() / 2));
    ::close(fd);
  }
  {
    // Half a frame, then silence: dropped after the partial-frame timeout (300 ms here).
    const int fd = rawConnect(port());
    const auto f = encodeRequest(request(StoreOp::Set, "key", "value"));
    sendBytes(fd, std::span(f.data(), f.size() - 1));
    const auto t0 = std::chrono::steady_clock::now();
    readUntilClosed(fd, 5s);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
    ::close(fd);
  }
  for (int i = 0; i < 50 && server.stats().refusedFrame < 3; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(server.stats().refusedFrame, 3u);
  expectStillServing();
}

/// Many connections throwing random, bit-flipped and truncated frames at the live server, interleaved with a good
/// client that must be served every time.
TEST_F(StoreServerTest, SeededFuzzOfTheLiveServer) {
  // Every refusal is logged; 200 of them would drown the test output.
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::err);
  std::mt19937_64 rng(7);
  StoreClient good("127.0.0.1", port(), "secret", 2s);
  constexpr int kConnections = 200;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = rawConnect(port());
    ASSERT_GE(fd, 0);
    std::vector<std::byte> f = encodeRequest(
        request(static_cast<StoreOp>(1 + rng() % 3), "k" + std::to_string(i), "", i % 5 == 0 ? "secret" : "wrong"));
    switch (rng() % 3) {
      case 0:
        for (auto& b : f) b = static_cast<std::byte>(rng());
        break;
      case 1:
        f[rng() % f.size()] ^= std::byte{0x40};
        break;
      default:
        f.resize(rng() % f.size());
        break;
    }
    if (!f.empty()) ::send(fd, f.data(), f.size(), MSG_NOSIGNAL);
    ::close(fd);
    if (i % 20 == 0) {
      good.set("probe", {static_cast<char>('a' + i % 26)});
      ASSERT_TRUE(good.get("probe", 1s).has_value());
    }
  }
  expectStillServing();
  const auto st = server.stats();
  EXPECT_GT(st.refusedFrame + st.refusedToken + st.refusedVersion, kConnections / 3u);
  spdlog::set_level(level);
}

TEST(StoreServerBind, ListensOnlyOnTheGivenAddress) {
  // 127.0.0.2 is a local address on Linux (all of 127/8 is loopback) but not 127.0.0.1.
  StoreServer server("127.0.0.2", 0, "t");
  EXPECT_EQ(rawConnect(server.port()), -1) << "the store answered on 127.0.0.1 too";
  StoreClient c("127.0.0.2", server.port(), "t", 2s);
  c.set("a", {'b'});
  EXPECT_TRUE(c.wait("a", 0ms));
  EXPECT_THROW(StoreServer("", 0, "t"), Error);
}

TEST(StoreClientConnect, NamesTheAddressWhenNobodyAnswers) {
  int port;
  {
    StoreServer s("127.0.0.1", 0, "t");
    port = s.port();
  }
  try {
    StoreClient c("127.0.0.1", port, "t", 200ms);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Timeout);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collbench::host
