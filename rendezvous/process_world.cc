#include "process_world.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>

#include "collbench/error.h"

namespace collbench::host {
namespace {

std::vector<std::string> splitList(std::string_view s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = s.find(',', start);
    out.emplace_back(s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

template <typename T>
T parseNumber(const BackendOptions& o, const char* key, T fallback) {
  auto it = o.find(key);
  if (it == o.end()) return fallback;
  T v{};
  const char* b = it->second.data();
  const char* e = b + it->second.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || it->second.empty()) {
    throw Error(Errc::InvalidArgument, fmt::format("gloo backend option {}=\"{}\" is not a number", key, it->second));
  }
  return v;
}

/// Splits "host:port" / "[v6]:port"; returns host ("" on syntax error).
std::string hostPart(std::string_view addr) {
  if (!addr.empty() && addr.front() == '[') {
    const std::size_t close = addr.find(']');
    if (close == std::string_view::npos || close + 1 >= addr.size() || addr[close + 1] != ':') return {};
    return std::string(addr.substr(1, close - 1));
  }
  const std::size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return {};
  return std::string(addr.substr(0, colon));
}

int portPart(std::string_view addr) {
  const std::size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos) return -1;
  int port = -1;
  const std::string_view p = addr.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port < 0 || port > 65535) return -1;
  return port;
}

void putLE(std::byte* at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
std::uint64_t getLE(const std::byte* at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::to_integer<std::uint64_t>(at[i]) << (8 * i);
  return v;
}

}  // namespace

ProcessWorld ProcessWorld::fromOptions(const BackendOptions& o) {
  ProcessWorld w;
  w.world = parseNumber<int>(o, "world", 1);
  w.rank = parseNumber<int>(o, "rank", 0);
  if (w.world < 1) throw Error(Errc::InvalidArgument, fmt::format("gloo backend: world={} must be >= 1", w.world));
  if (w.rank < 0 || w.rank >= w.world) {
    throw Error(Errc::InvalidArgument,
                fmt::format("gloo backend: rank={} is not in 0..{} (world={})", w.rank, w.world - 1, w.world));
  }
  if (auto it = o.find("addresses"); it != o.end()) w.addresses = splitList(it->second);
  if (w.addresses.empty() && w.world == 1) w.addresses = {"127.0.0.1:0"};
  if (static_cast<int>(w.addresses.size()) != w.world) {
    throw Error(Errc::InvalidArgument,
                fmt::format("gloo backend: addresses lists {} tasks but world={}", w.addresses.size(), w.world));
  }
  for (std::size_t i = 0; i < w.addresses.size(); ++i) {
    if (hostPart(w.addresses[i]).empty() || portPart(w.addresses[i]) < 0) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("gloo backend: addresses[{}]=\"{}\" is not host:port", i, w.addresses[i]));
    }
  }
  if (auto it = o.find("tasks"); it != o.end()) w.tasks = splitList(it->second);
  if (w.tasks.size() != w.addresses.size()) {
    w.tasks.clear();
    for (int r = 0; r < w.world; ++r) w.tasks.push_back(fmt::format("rank {}", r));
  }
  w.master = o.count("master") ? o.at("master") : w.addresses[0];
  if (w.world > 1 && (hostPart(w.master).empty() || portPart(w.master) <= 0)) {
    throw Error(Errc::InvalidArgument, fmt::format("gloo backend: master=\"{}\" is not host:port", w.master));
  }
  if (auto it = o.find("store"); it != o.end()) w.store = it->second;
  if (w.store != "tcp" && (w.store.rfind("file:", 0) != 0 || w.store.size() <= 5)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("gloo backend: store=\"{}\" is neither \"tcp\" nor \"file:<directory>\"", w.store));
  }
  if (auto it = o.find("token"); it != o.end() && !it->second.empty()) {
    w.token = it->second;
  } else {
    std::string joined;
    for (const auto& a : w.addresses) joined += a + ",";
    w.token = deriveClusterToken(joined);
  }
  if (o.count("timeout")) {
    const double t = parseNumber<double>(o, "timeout", kDefaultTimeoutSeconds);
    if (!(t > 0)) throw Error(Errc::InvalidArgument, fmt::format("gloo backend: timeout={} must be > 0", t));
    w.timeoutSeconds = t;
  }
  return w;
}

std::string ProcessWorld::describeRank(int r) const {
  if (r < 0 || r >= world) return fmt::format("rank {}", r);
  const auto ru = static_cast<std::size_t>(r);
  const std::string& task = tasks[ru];
  if (task == fmt::format("rank {}", r)) return fmt::format("rank {} ({})", r, addresses[ru]);
  return fmt::format("{} (rank {}, {})", task, r, addresses[ru]);
}

std::string ProcessWorld::hostOf(int r) const { return hostPart(addresses[static_cast<std::size_t>(r)]); }

std::uint64_t fnv1a(std::span<const std::byte> data, std::uint64_t seed) {
  constexpr std::uint64_t kPrime = 0x100000001b3ull;
  std::uint64_t h = seed;
  for (std::byte b : data) {
    h ^= std::to_integer<std::uint64_t>(b);
    h *= kPrime;
  }
  return h;
}

std::uint64_t fnv1a(std::string_view text, std::uint64_t seed) {
  return fnv1a(std::as_bytes(std::span<const char>(text.data(), text.size())), seed);
}

std::string deriveClusterToken(std::string_view clusterSpecText) {
  return fmt::format("derived-{:016x}", fnv1a(clusterSpecText, fnv1a("collbench cluster token v1")));
}

std::uint64_t scheduleFingerprint(const Schedule& s) {
  std::uint64_t h = fnv1a(s.algorithm);
  auto mix = [&h](std::uint64_t v) {
    std::byte b[8];
    putLE(b, v, 8);
    h = fnv1a(std::span<const std::byte>(b, 8), h);
  };
  mix(static_cast<std::uint64_t>(s.spec.kind));
  mix(static_cast<std::uint64_t>(s.spec.nranks));
  mix(s.spec.count);
  mix(static_cast<std::uint64_t>(s.spec.dtype));
  mix(static_cast<std::uint64_t>(s.spec.op));
  mix(static_cast<std::uint64_t>(s.spec.root));
  mix(s.native ? 1 : 0);
  for (const RankProgram& p : s.ranks) {
    mix(p.ops.size());
    for (const Op& op : p.ops) {
      mix(static_cast<std::uint64_t>(op.kind) | (static_cast<std::uint64_t>(op.src.buffer) << 8) |
          (static_cast<std::uint64_t>(op.dst.buffer) << 16) | (static_cast<std::uint64_t>(op.channel) << 24) |
          (static_cast<std::uint64_t>(static_cast<std::uint32_t>(op.peer)) << 32));
      mix(op.src.offset);
      mix(op.dst.offset);
      mix(op.bytes);
      for (int d : op.deps) mix(static_cast<std::uint64_t>(d));
    }
  }
  return h;
}

CollectiveHeader CollectiveHeader::of(const Schedule& s, int rank, std::uint64_t sequence, std::uint64_t fingerprint) {
  CollectiveHeader h;
  h.kind = s.spec.kind;
  h.dtype = s.spec.dtype;
  h.op = s.spec.op;
  h.root = s.spec.root;
  h.nranks = s.spec.nranks;
  h.rank = rank;
  h.sequence = sequence;
  h.count = s.spec.count;
  h.algorithmHash = fnv1a(s.algorithm);
  h.scheduleHash = fingerprint;
  return h;
}

std::array<std::byte, CollectiveHeader::kBytes> CollectiveHeader::encode() const {
  std::array<std::byte, kBytes> b{};
  putLE(&b[0], kMagic, 4);
  putLE(&b[4], version, 2);
  b[6] = static_cast<std::byte>(kind);
  b[7] = static_cast<std::byte>(dtype);
  b[8] = static_cast<std::byte>(op);
  putLE(&b[12], static_cast<std::uint32_t>(root), 4);
  putLE(&b[16], static_cast<std::uint32_t>(nranks), 4);
  putLE(&b[20], static_cast<std::uint32_t>(rank), 4);
  putLE(&b[24], sequence, 8);
  putLE(&b[32], count, 8);
  putLE(&b[40], algorithmHash, 8);
  putLE(&b[48], scheduleHash, 8);
  putLE(&b[56], epochs, 4);
  return b;
}

CollectiveHeader CollectiveHeader::decode(std::span<const std::byte> b, std::string* whyNot) {
  CollectiveHeader h;
  whyNot->clear();
  if (b.size() != kBytes || getLE(&b[0], 4) != kMagic) {
    *whyNot = "not a collbench collective header";
    return h;
  }
  h.version = static_cast<std::uint16_t>(getLE(&b[4], 2));
  if (h.version != kProcessProtocolVersion) {
    *whyNot = fmt::format("protocol version {} (this process speaks {})", h.version, kProcessProtocolVersion);
    return h;
  }
  h.kind = static_cast<Collective>(std::to_integer<int>(b[6]));
  h.dtype = static_cast<DType>(std::to_integer<int>(b[7]));
  h.op = static_cast<ReduceOp>(std::to_integer<int>(b[8]));
  h.root = static_cast<std::int32_t>(getLE(&b[12], 4));
  h.nranks = static_cast<std::int32_t>(getLE(&b[16], 4));
  h.rank = static_cast<std::int32_t>(getLE(&b[20], 4));
  h.sequence = getLE(&b[24], 8);
  h.count = getLE(&b[32], 8);
  h.algorithmHash = getLE(&b[40], 8);
  h.scheduleHash = getLE(&b[48], 8);
  h.epochs = static_cast<std::uint32_t>(getLE(&b[56], 4));
  return h;
}

std::string describeMismatch(const CollectiveHeader& mine, const CollectiveHeader& theirs) {
  auto name = [](auto v) {
    if constexpr (std::is_same_v<decltype(v), Collective>) {
      const int i = static_cast<int>(v);
      return i >= 0 && i <= static_cast<int>(Collective::Barrier) ? std::string(toString(v)) : fmt::format("#{}", i);
    } else if constexpr (std::is_same_v<decltype(v), DType>) {
      const int i = static_cast<int>(v);
      return i >= 0 && i <= static_cast<int>(DType::I64) ? std::string(toString(v)) : fmt::format("#{}", i);
    } else {
      const int i = static_cast<int>(v);
      return i >= 0 && i <= static_cast<int>(ReduceOp::Avg) ? std::string(toString(v)) : fmt::format("#{}", i);
    }
  };
  // Each rank's side in words, lower rank first: the text reads the same in both ranks' errors and when relayed to
  // a third rank, so nobody has to know whose "here" it was.
  std::vector<std::string> a, b;
  auto differ = [&](bool differs, std::string ours, std::string other) {
    if (!differs) return;
    a.push_back(std::move(ours));
    b.push_back(std::move(other));
  };
  differ(mine.sequence != theirs.sequence, fmt::format("sequence number {}", mine.sequence),
         fmt::format("sequence number {}", theirs.sequence));
  differ(mine.kind != theirs.kind, name(mine.kind), name(theirs.kind));
  differ(mine.nranks != theirs.nranks, fmt::format("{} ranks", mine.nranks), fmt::format("{} ranks", theirs.nranks));
  differ(mine.count != theirs.count, fmt::format("count {}", mine.count), fmt::format("count {}", theirs.count));
  differ(mine.dtype != theirs.dtype, fmt::format("dtype {}", name(mine.dtype)),
         fmt::format("dtype {}", name(theirs.dtype)));
  differ(mine.op != theirs.op, fmt::format("op {}", name(mine.op)), fmt::format("op {}", name(theirs.op)));
  differ(mine.root != theirs.root, fmt::format("root {}", mine.root), fmt::format("root {}", theirs.root));
  differ(mine.epochs != theirs.epochs, fmt::format("{} iterations in a row", mine.epochs),
         fmt::format("{} iterations in a row", theirs.epochs));
  std::string note;
  if (mine.algorithmHash != theirs.algorithmHash) {
    note = "different algorithms";
  } else if (a.empty() && mine.scheduleHash != theirs.scheduleHash) {
    note = "same call but different schedules (chunk size or channels differ)";
  }
  if (a.empty() && note.empty()) return {};
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  std::string what;
  if (!a.empty()) {
    const bool mineFirst = mine.rank <= theirs.rank;
    const auto& first = mineFirst ? a : b;
    const auto& second = mineFirst ? b : a;
    what = fmt::format("rank {}: {}; rank {}: {}", mineFirst ? mine.rank : theirs.rank, join(first),
                       mineFirst ? theirs.rank : mine.rank, join(second));
  }
  if (!note.empty()) what += (what.empty() ? "" : "; ") + note;
  return fmt::format("rank {} (this process) and rank {} called different collectives: {}", mine.rank, theirs.rank,
                     what);
}

std::uint64_t Hello::digest(std::string_view token) { return fnv1a(token, fnv1a("collbench hello v1")); }

std::array<std::byte, Hello::kBytes> Hello::encode() const {
  std::array<std::byte, kBytes> b{};
  putLE(&b[0], kMagic, 4);
  putLE(&b[4], version, 2);
  putLE(&b[8], static_cast<std::uint32_t>(rank), 4);
  putLE(&b[12], static_cast<std::uint32_t>(world), 4);
  putLE(&b[16], tokenDigest, 8);
  return b;
}

std::string Hello::check(std::span<const std::byte> b, int expectedRank, int world, std::uint64_t tokenDigest) {
  if (b.size() != kBytes || getLE(&b[0], 4) != kMagic) return "its first message is not a collbench hello";
  const auto version = getLE(&b[4], 2);
  if (version != kProcessProtocolVersion) {
    return fmt::format("it speaks protocol version {}, this process {}", version, kProcessProtocolVersion);
  }
  if (getLE(&b[16], 8) != tokenDigest) return "it has a different cluster token (COLLBENCH_CLUSTER_TOKEN)";
  const auto rank = static_cast<std::int32_t>(getLE(&b[8], 4));
  const auto w = static_cast<std::int32_t>(getLE(&b[12], 4));
  if (w != world) return fmt::format("it believes the world has {} ranks, this process {}", w, world);
  if (rank != expectedRank) return fmt::format("it says it is rank {}", rank);
  return {};
}

std::array<std::byte, ControlMessage::kBytes> ControlMessage::encode() const {
  std::array<std::byte, kBytes> b{};
  putLE(&b[0], kMagic, 4);
  putLE(&b[4], kProcessProtocolVersion, 2);
  putLE(&b[6], static_cast<std::uint16_t>(kind), 2);
  putLE(&b[8], static_cast<std::uint32_t>(code), 4);
  putLE(&b[12], static_cast<std::uint32_t>(origin), 4);
  putLE(&b[16], static_cast<std::uint32_t>(culprit), 4);
  const std::size_t n = std::min(reason.size(), kMaxReason);
  putLE(&b[20], n, 4);
  std::memcpy(&b[24], reason.data(), n);
  return b;
}

std::optional<ControlMessage> ControlMessage::decode(std::span<const std::byte> b) {
  if (b.size() != kBytes || getLE(&b[0], 4) != kMagic || getLE(&b[4], 2) != kProcessProtocolVersion) {
    return std::nullopt;
  }
  ControlMessage m;
  const auto kind = getLE(&b[6], 2);
  if (kind != static_cast<std::uint16_t>(Kind::Abort) && kind != static_cast<std::uint16_t>(Kind::Goodbye) &&
      kind != static_cast<std::uint16_t>(Kind::Heartbeat)) {
    return std::nullopt;
  }
  m.kind = static_cast<Kind>(kind);
  const auto code = getLE(&b[8], 4);
  m.code = code <= static_cast<std::uint64_t>(Errc::BackendError) ? static_cast<Errc>(code) : Errc::BackendError;
  m.origin = static_cast<std::int32_t>(getLE(&b[12], 4));
  m.culprit = static_cast<std::int32_t>(getLE(&b[16], 4));
  const std::size_t n = std::min<std::size_t>(getLE(&b[20], 4), kMaxReason);
  m.reason.assign(reinterpret_cast<const char*>(&b[24]), n);
  return m;
}

}  // namespace collbench::host
