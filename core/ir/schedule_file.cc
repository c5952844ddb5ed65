#include "collbench/schedule_file.h"

#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "collbench/error.h"
#include "collbench/json_document.h"
#include "collbench/json_fields.h"
#include "collbench/validator.h"

namespace collbench {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

/// Cap on one rank buffer described by a file: 1 PiB, beyond any machine's memory, so that every offset + size and
/// every product of a chunk count and a chunk size in a readable file stays far below 2^64.
constexpr std::uint64_t kMaxBufferBytes = std::uint64_t{1} << 50;

/// The names of the file: buffers are spelt out ("input", not dump()'s "in").
constexpr std::pair<BufferKind, std::string_view> kBufferNames[] = {
    {BufferKind::Input, "input"}, {BufferKind::Output, "output"}, {BufferKind::Scratch, "scratch"}};
constexpr OpKind kOpKinds[] = {OpKind::Send,   OpKind::Recv,         OpKind::RecvReduce, OpKind::Copy,
                               OpKind::Reduce, OpKind::SwitchReduce, OpKind::Multicast};

std::string_view bufferName(BufferKind b) {
  for (const auto& [kind, name] : kBufferNames) {
    if (kind == b) return name;
  }
  return "?";
}

bool rooted(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

/// The words of one unit system: bytes, or chunks of the input.
struct Units {
  bool chunks = false;
  const char* offset() const { return chunks ? "chunk" : "offset"; }
  const char* size() const { return chunks ? "chunk_count" : "bytes"; }
  const char* scratch() const { return chunks ? "scratch_chunks" : "scratch_bytes"; }
  const char* noun() const { return chunks ? "chunks" : "bytes"; }
};

/// One JSON object of the file at `path` ("ranks[2].ops[5]"): the shared field reader (json_fields.h), its unknown
/// fields refused.
class Fields : public JsonFields {
 public:
  Fields(std::string_view source, std::string path, const json& obj, const std::set<std::string>& known)
      : JsonFields(source, std::move(path), obj) {
    allowOnly(known);
  }
};

/// What the op readers share: the spec, the units and each buffer's capacity in them.
struct FileContext {
  std::string_view source;
  CollectiveSpec unitSpec;  ///< the spec at one unit per byte (bytes) or per element (chunks)
  Units units;
  std::uint64_t unitBytes = 1;  ///< bytes of one unit in unitSpec
  int switchGroups = 0;         ///< entries of the top-level switch_groups
};

std::uint64_t capacityUnits(const FileContext& cx, BufferKind b, std::uint64_t scratch) {
  switch (b) {
    case BufferKind::Input:
      return cx.unitSpec.inputBytes() / cx.unitBytes;
    case BufferKind::Output:
      return cx.unitSpec.outputBytes() / cx.unitBytes;
    case BufferKind::Scratch:
      return scratch;
  }
  return 0;
}

BufRef readRef(const Fields& op, const char* role, const FileContext& cx, std::uint64_t size, std::uint64_t scratch) {
  const Fields ref(cx.source, op.path(role), op.need(role), {"buffer", cx.units.offset()});
  BufRef r;
  const std::string name = ref.string("buffer");
  bool found = false;
  for (const auto& [kind, spelt] : kBufferNames) {
    if (name == spelt) r.buffer = kind, found = true;
  }
  if (!found) ref.fail("buffer", fmt::format("\"{}\" is not a buffer (input, output, scratch)", printable(name)));
  const auto offset = static_cast<std::uint64_t>(ref.integer(cx.units.offset(), 0, kMaxBufferBytes));
  const std::uint64_t cap = capacityUnits(cx, r.buffer, scratch);
  if (offset > cap || size > cap - offset) {
    ref.fail(cx.units.offset(),
             fmt::format("{} [{}, {}) of the {} are out of bounds (it has {} {}{})", cx.units.noun(), offset,
                         offset + size, name, cap, cx.units.noun(),
                         r.buffer == BufferKind::Scratch ? fmt::format(": the rank's {}", cx.units.scratch()) : ""));
  }
  r.offset = static_cast<std::size_t>(offset);
  return r;
}

Op readOp(const json& j, int rank, int index, const FileContext& cx, std::uint64_t scratch) {
  const std::string path = fmt::format("ranks[{}].ops[{}]", rank, index);
  const Units other{!cx.units.chunks};
  if (j.is_object()) {
    for (const char* wrong : {other.offset(), other.size()}) {
      if (j.contains(wrong)) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("{}: {}.{}: this file counts {} ({}): write {}", printable(cx.source), path, wrong,
                                cx.units.noun(), cx.units.chunks ? "top-level chunks is set" : "no top-level chunks",
                                std::string_view(wrong) == other.size() ? cx.units.size() : cx.units.offset()));
      }
    }
  }
  const Fields f(cx.source, path, j,
                 {"kind", "peer", "src", "dst", cx.units.size(), "deps", "channel", "group", "root"});
  Op op;
  const std::string kind = f.string("kind");
  bool found = false;
  for (OpKind k : kOpKinds) {
    if (kind == toString(k)) op.kind = k, found = true;
  }
  if (!found) {
    f.fail("kind", fmt::format("\"{}\" is not an op (send, recv, recv_reduce, copy, reduce, switch_reduce, multicast)",
                               printable(kind)));
  }
  const int n = cx.unitSpec.nranks;
  if (op.isComm()) {
    op.peer = static_cast<int>(f.integer("peer", std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
    if (op.peer < 0 || op.peer >= n) f.fail("peer", fmt::format("{} is not a rank (0..{})", op.peer, n - 1));
    if (op.peer == rank)
      f.fail("peer", fmt::format("{} is this op's own rank; a {} needs another rank", op.peer, kind));
  } else if (f.has("peer")) {
    f.fail("peer", op.isSwitch()
                       ? fmt::format("a {} has no peer: it names its group and root", kind)
                       : fmt::format("a {} is local and has no peer (only send, recv and recv_reduce do)", kind));
  }
  if (op.isSwitch()) {
    if (cx.switchGroups == 0) f.fail("group", fmt::format("a {} needs the top-level switch_groups", kind));
    op.group = static_cast<int>(f.integer("group", 0, cx.switchGroups - 1));
    op.peer = static_cast<int>(f.integer("root", 0, n - 1));
  } else {
    for (const char* field : {"group", "root"}) {
      if (f.has(field)) f.fail(field, fmt::format("a {} has no {} (only switch_reduce and multicast do)", kind, field));
    }
  }
  const auto size = static_cast<std::uint64_t>(f.integer(cx.units.size(), 0, kMaxBufferBytes));
  op.bytes = static_cast<std::size_t>(size);
  if (op.readsOn(rank)) {
    op.src = readRef(f, "src", cx, size, scratch);
  } else if (f.has("src")) {
    f.fail("src", fmt::format("a {} reads nothing local {}and has no src", kind, op.isSwitch() ? "off its root " : ""));
  }
  if (op.writesOn(rank)) {
    op.dst = readRef(f, "dst", cx, size, scratch);
  } else if (f.has("dst")) {
    f.fail("dst",
           fmt::format("a {} writes nothing local {}and has no dst", kind, op.isSwitch() ? "off its root " : ""));
  }
  if (f.has("deps")) {
    const json& deps = f.array("deps");
    for (std::size_t k = 0; k < deps.size(); ++k) {
      const std::string field = fmt::format("deps[{}]", k);
      const auto d = f.integerValue(deps[k], field, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
      if (d < 0 || d >= index) {
        f.fail(field, index == 0 ? fmt::format("{} is not an earlier op: op 0 of rank {} has none", d, rank)
                                 : fmt::format("{} is not an earlier op of rank {} (0..{})", d, rank, index - 1));
      }
      op.deps.push_back(static_cast<int>(d));
    }
  }
  if (f.has("channel")) op.channel = static_cast<int>(f.integer("channel", 0, std::numeric_limits<int>::max()));
  return op;
}

/// `s` with every offset, size and scratch size multiplied by `unit` bytes, for `spec`.
Schedule scaled(const Schedule& s, const CollectiveSpec& spec, std::size_t unit) {
  Schedule out = s;
  out.spec = spec;
  for (RankProgram& r : out.ranks) {
    r.scratchBytes *= unit;
    for (Op& op : r.ops) {
      op.bytes *= unit;
      op.src.offset *= unit;
      op.dst.offset *= unit;
    }
  }
  return out;
}

/// The count whose input buffer holds `elements` elements.
std::size_t countForInputElements(Collective kind, std::size_t elements, int nranks) {
  return kind == Collective::ReduceScatter ? elements / static_cast<std::size_t>(nranks) : elements;
}

/// validate() of the instance out of place and in place, its errors re-raised as one line naming ranks[r].ops[i].
void validateInstance(const Schedule& instance, const FileContext& cx) {
  for (bool inPlace : {false, true}) {
    try {
      validate(instance, ValidateOptions{inPlace});
    } catch (const Error& e) {
      const std::string what = e.what();
      const std::string scale =
          cx.units.chunks ? fmt::format(" (checked with one {} element per chunk)", toString(cx.unitSpec.dtype)) : "";
      int rank = -1, op = -1;
      // The validator's messages about one op start "rank R op I" (validator.h): name it as the file does.
      if (std::sscanf(what.c_str(), "rank %d op %d", &rank, &op) == 2) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("{}: ranks[{}].ops[{}]: {}{}", printable(cx.source), rank, op, what, scale));
      }
      throw Error(Errc::InvalidArgument, fmt::format("{}: {}{}", printable(cx.source), what, scale));
    }
  }
}

ordered_json refToJson(const BufRef& r, const Units& u) {
  ordered_json j;
  j["buffer"] = bufferName(r.buffer);
  j[u.offset()] = r.offset;
  return j;
}

ordered_json opToJson(const Op& op, int rank, const Units& u) {
  ordered_json j;
  j["kind"] = toString(op.kind);
  if (op.isComm()) j["peer"] = op.peer;
  if (op.isSwitch()) {
    j["group"] = op.group;
    j["root"] = op.peer;
  }
  if (op.readsOn(rank)) j["src"] = refToJson(op.src, u);
  if (op.writesOn(rank)) j["dst"] = refToJson(op.dst, u);
  j[u.size()] = op.bytes;
  if (!op.deps.empty()) j["deps"] = op.deps;
  if (op.channel != 0) j["channel"] = op.channel;
  return j;
}

}  // namespace

ScheduleFile toScheduleFile(const Schedule& s, std::string command) {
  if (s.native) {
    throw Error(Errc::InvalidArgument,
                fmt::format("algorithm '{}' is a library's own call: it has no ops to write", s.algorithm));
  }
  ScheduleFile f;
  f.schedule = s;
  f.tool = std::string("collbench ") + COLLBENCH_VERSION;
  f.command = std::move(command);
  return f;
}

std::string toJson(const ScheduleFile& f) {
  const Units u{f.chunks > 0};
  const CollectiveSpec& spec = f.schedule.spec;
  ordered_json coll;
  coll["kind"] = toString(spec.kind);
  coll["nranks"] = spec.nranks;
  if (!u.chunks) coll["count"] = spec.count;
  coll["dtype"] = toString(spec.dtype);
  if (spec.reduces()) coll["op"] = toString(spec.op);
  if (rooted(spec.kind)) coll["root"] = spec.root;
  std::string out = "{\n";
  auto field = [&out](std::string_view key, const ordered_json& v) {
    out += fmt::format("  \"{}\": {},\n", key, v.dump());
  };
  field("format", ScheduleFile::kFormat);
  field("version", ScheduleFile::kVersion);
  field("algorithm", f.schedule.algorithm);
  if (!f.description.empty()) field("description", f.description);
  if (!f.tool.empty()) field("tool", f.tool);
  if (!f.command.empty()) field("command", f.command);
  field("collective", coll);
  if (u.chunks) field("chunks", f.chunks);
  if (f.schedule.protocol) field("protocol", toString(*f.schedule.protocol));
  if (f.schedule.usesSwitch()) field("switch_groups", f.schedule.switchGroups);
  out += "  \"ranks\": [";
  for (std::size_t r = 0; r < f.schedule.ranks.size(); ++r) {
    const RankProgram& prog = f.schedule.ranks[r];
    out += fmt::format("{}\n    {{\"{}\": {}, \"ops\": [", r ? "," : "", u.scratch(), prog.scratchBytes);
    for (std::size_t i = 0; i < prog.ops.size(); ++i) {
      out += fmt::format("{}\n      {}", i ? "," : "", opToJson(prog.ops[i], static_cast<int>(r), u).dump());
    }
    out += prog.ops.empty() ? "]}" : "\n    ]}";
  }
  out += "\n  ]\n}\n";
  return out;
}

ScheduleFile parseScheduleFile(std::string_view text, std::string_view source) {
  const json root = parseJsonDocument(text, source);
  const Fields top(source, "", root,
                   {"format", "version", "algorithm", "description", "tool", "command", "collective", "chunks",
                    "protocol", "switch_groups", "ranks"});
  if (const std::string format = top.string("format"); format != ScheduleFile::kFormat) {
    top.fail("format", fmt::format("expected \"{}\", got \"{}\"", ScheduleFile::kFormat, printable(format)));
  }
  if (const json& v = top.need("version"); v != ScheduleFile::kVersion) {
    top.fail("version", fmt::format("version {} is not supported (this collbench reads version {})", echoJson(v),
                                    ScheduleFile::kVersion));
  }
  ScheduleFile f;
  f.source = std::string(source);
  Schedule& s = f.schedule;
  s.algorithm = top.string("algorithm");
  if (s.algorithm.empty() || s.algorithm == "auto") {
    top.fail("algorithm", fmt::format("\"{}\" cannot name a schedule (empty, or auto: the selector's choice)",
                                      printable(s.algorithm)));
  }
  if (top.has("description")) f.description = top.string("description");
  if (top.has("tool")) f.tool = top.string("tool");
  if (top.has("command")) f.command = top.string("command");
  if (top.has("protocol")) s.protocol = top.parsed("protocol", [](const std::string& t) { return parseProtocol(t); });

  const Fields coll(source, "collective", top.need("collective"), {"kind", "nranks", "count", "dtype", "op", "root"});
  CollectiveSpec& spec = s.spec;
  spec.kind = coll.parsed("kind", [](const std::string& t) { return parseCollective(t); });
  spec.nranks = static_cast<int>(coll.integer("nranks", 1, std::numeric_limits<int>::max()));
  spec.dtype = coll.parsed("dtype", [](const std::string& t) { return parseDType(t); });
  if (spec.reduces()) {
    spec.op = coll.parsed("op", [](const std::string& t) { return parseReduceOp(t); });
  } else if (coll.has("op")) {
    coll.fail("op", fmt::format("{} does not reduce; remove op", toString(spec.kind)));
  }
  if (coll.has("root")) {
    if (!rooted(spec.kind)) coll.fail("root", fmt::format("{} has no root; remove root", toString(spec.kind)));
    spec.root = static_cast<int>(coll.integer("root", 0, std::numeric_limits<int>::max()));
    if (spec.root >= spec.nranks) {
      coll.fail("root", fmt::format("{} is not a rank (0..{})", spec.root, spec.nranks - 1));
    }
  }
  const std::uint64_t es = spec.elementSize();
  // Every buffer of the spec, nranks-fold for the gathered and scattered kinds, stays within kMaxBufferBytes.
  const auto maxElements = static_cast<std::int64_t>(kMaxBufferBytes / es / static_cast<std::uint64_t>(spec.nranks));
  FileContext cx{source, spec, Units{top.has("chunks")}, 1};
  if (cx.units.chunks) {
    if (coll.has("count")) {
      coll.fail("count", "a file in chunks (top-level chunks) runs at every size its chunks divide; remove count");
    }
    if (spec.kind == Collective::Barrier) top.fail("chunks", "barrier moves no bytes; remove chunks");
    f.chunks = static_cast<std::size_t>(top.integer("chunks", 1, maxElements));
    if (spec.kind == Collective::ReduceScatter && f.chunks % static_cast<std::size_t>(spec.nranks) != 0) {
      top.fail("chunks", fmt::format("{} is not a multiple of nranks {}: reduce_scatter's output is 1/nranks of its "
                                     "input, which must be whole chunks",
                                     f.chunks, spec.nranks));
    }
    cx.unitSpec.count = countForInputElements(spec.kind, f.chunks, spec.nranks);
    cx.unitBytes = es;
  } else {
    if (!coll.has("count")) {
      coll.fail("count", "missing required field (or give top-level chunks to run at several sizes)");
    }
    spec.count = static_cast<std::size_t>(coll.integer("count", 0, maxElements));
    cx.unitSpec = spec;
  }

  if (top.has("switch_groups")) {
    const json& groups = top.array("switch_groups");
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const std::string field = fmt::format("switch_groups[{}]", g);
      if (!groups[g].is_array() || groups[g].empty()) {
        top.fail(field, fmt::format("expected a non-empty array of ranks, got {}", echoJson(groups[g])));
      }
      std::vector<int> members;
      for (std::size_t k = 0; k < groups[g].size(); ++k) {
        const auto r = top.integerValue(groups[g][k], fmt::format("{}[{}]", field, k), 0, spec.nranks - 1);
        if (!members.empty() && r <= members.back()) {
          top.fail(field, fmt::format("ranks must be distinct and ascending, got {}", echoJson(groups[g])));
        }
        members.push_back(static_cast<int>(r));
      }
      s.switchGroups.push_back(std::move(members));
    }
    cx.switchGroups = static_cast<int>(s.switchGroups.size());
  }
  const json& ranks = top.array("ranks");
  if (static_cast<int>(ranks.size()) != spec.nranks) {
    top.fail("ranks", fmt::format("{} rank programs for collective.nranks {}", ranks.size(), spec.nranks));
  }
  for (int r = 0; r < spec.nranks; ++r) {
    const Fields prog(source, fmt::format("ranks[{}]", r), ranks[static_cast<std::size_t>(r)],
                      {"ops", cx.units.scratch()});
    RankProgram rp;
    const std::uint64_t scratch =
        prog.has(cx.units.scratch())
            ? static_cast<std::uint64_t>(prog.integer(cx.units.scratch(), 0, kMaxBufferBytes / cx.unitBytes))
            : 0;
    rp.scratchBytes = static_cast<std::size_t>(scratch);
    const json& ops = prog.array("ops");
    for (std::size_t i = 0; i < ops.size(); ++i) rp.ops.push_back(readOp(ops[i], r, static_cast<int>(i), cx, scratch));
    s.ranks.push_back(std::move(rp));
  }
  validateInstance(cx.units.chunks ? scaled(s, cx.unitSpec, cx.unitBytes) : s, cx);
  return f;
}

ScheduleFile readScheduleFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(Errc::InvalidArgument, fmt::format("cannot read schedule file '{}'", printable(path)));
  std::stringstream ss;
  ss << in.rdbuf();
  return parseScheduleFile(ss.str(), path);
}

void writeScheduleFile(const ScheduleFile& f, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error(Errc::InvalidArgument, fmt::format("cannot write schedule file '{}'", printable(path)));
  out << toJson(f);
  if (!out) throw Error(Errc::InvalidArgument, fmt::format("error writing schedule file '{}'", printable(path)));
}

Schedule instantiate(const ScheduleFile& f, const CollectiveSpec& spec) {
  const CollectiveSpec& own = f.schedule.spec;
  const std::string src = printable(f.source.empty() ? "schedule" : f.source);
  auto refuse = [&](std::string_view field, const std::string& problem) {
    throw Error(Errc::InvalidArgument, fmt::format("{}: collective.{}: {}", src, field, problem));
  };
  if (spec.kind != own.kind) {
    refuse("kind", fmt::format("the file is {}; this run is {}", toString(own.kind), toString(spec.kind)));
  }
  if (spec.nranks != own.nranks) {
    refuse("nranks", fmt::format("the file is for {} ranks; this run has {}", own.nranks, spec.nranks));
  }
  if (spec.dtype != own.dtype) {
    refuse("dtype", fmt::format("the file is for {}; this run is {}", toString(own.dtype), toString(spec.dtype)));
  }
  if (own.reduces() && spec.op != own.op) {
    refuse("op", fmt::format("the file reduces with {}; this run with {}", toString(own.op), toString(spec.op)));
  }
  if (rooted(own.kind) && spec.root != own.root) {
    refuse("root", fmt::format("the file's root is {}; this run's is {}", own.root, spec.root));
  }
  const std::size_t size = std::max(spec.inputBytes(), spec.outputBytes());
  if (f.chunks == 0) {
    if (spec.count != own.count) {
      refuse("count", fmt::format("a file in bytes runs only at its own size, {} elements ({} B), not at {} elements "
                                  "({} B); write offsets in chunks to run at several sizes",
                                  own.count, ownSizeBytes(f), spec.count, size));
    }
    return f.schedule;
  }
  const std::size_t elements = spec.inputBytes() / spec.elementSize();
  if (elements % f.chunks != 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: chunks: {} chunks do not divide the input of size {} B ({} {} elements); run sizes "
                            "whose input element count is a multiple of {}",
                            src, f.chunks, size, elements, toString(spec.dtype), f.chunks));
  }
  const std::size_t chunkBytes = spec.inputBytes() / f.chunks;
  for (std::size_t r = 0; r < f.schedule.ranks.size(); ++r) {
    const std::size_t scratch = f.schedule.ranks[r].scratchBytes;
    if (chunkBytes != 0 && scratch > kMaxBufferBytes / chunkBytes) {
      throw Error(Errc::InvalidArgument, fmt::format("{}: ranks[{}].scratch_chunks: {} chunks of {} B exceed {} B", src,
                                                     r, scratch, chunkBytes, kMaxBufferBytes));
    }
  }
  return scaled(f.schedule, spec, chunkBytes);
}

std::size_t ownSizeBytes(const ScheduleFile& f) {
  if (f.chunks != 0) return 0;
  return std::max(f.schedule.spec.inputBytes(), f.schedule.spec.outputBytes());
}

}  // namespace collbench
