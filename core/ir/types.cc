#include "collbench/types.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "collbench/error.h"

namespace collbench {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

template <typename E, std::size_t N>
E parseName(std::string_view what, std::string_view value, const std::array<std::pair<std::string_view, E>, N>& names,
            std::string_view accepted) {
  const std::string key = lower(value);
  for (const auto& [name, e] : names) {
    if (key == name) return e;
  }
  throw Error(Errc::InvalidArgument, fmt::format("unknown {} '{}' (accepted: {})", what, printable(value), accepted));
}

}  // namespace

std::size_t dtypeSize(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F16:
    case DType::BF16:
      return 2;
  }
  COLLBENCH_CHECK(false, "bad dtype {}", static_cast<int>(t));
}

bool isFloating(DType t) { return t != DType::I32 && t != DType::I64; }

std::string_view toString(DType t) {
  switch (t) {
    case DType::F32:
      return "float";
    case DType::F64:
      return "double";
    case DType::F16:
      return "half";
    case DType::BF16:
      return "bfloat16";
    case DType::I32:
      return "int32";
    case DType::I64:
      return "int64";
  }
  return "?";
}

std::string_view toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Prod:
      return "prod";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Avg:
      return "avg";
  }
  return "?";
}

std::string_view toString(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return "all_reduce";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::AllGather:
      return "all_gather";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Reduce:
      return "reduce";
    case Collective::Barrier:
      return "barrier";
  }
  return "?";
}

DType parseDType(std::string_view s) {
  static constexpr std::array<std::pair<std::string_view, DType>, 16> kNames{{
      {"float", DType::F32},
      {"f32", DType::F32},
      {"float32", DType::F32},
      {"fp32", DType::F32},
      {"double", DType::F64},
      {"f64", DType::F64},
      {"float64", DType::F64},
      {"half", DType::F16},
      {"f16", DType::F16},
      {"float16", DType::F16},
      {"fp16", DType::F16},
      {"bfloat16", DType::BF16},
      {"bf16", DType::BF16},
      {"int32", DType::I32},
      {"i32", DType::I32},
      {"int", DType::I32},
  }};
  const std::string key = lower(s);
  if (key == "int64" || key == "i64" || key == "long") return DType::I64;
  return parseName("datatype", s, kNames, "float, double, half, bfloat16, int32, int64");
}

ReduceOp parseReduceOp(std::string_view s) {
  static constexpr std::array<std::pair<std::string_view, ReduceOp>, 6> kNames{{
      {"sum", ReduceOp::Sum},
      {"prod", ReduceOp::Prod},
      {"min", ReduceOp::Min},
      {"max", ReduceOp::Max},
      {"avg", ReduceOp::Avg},
      {"mean", ReduceOp::Avg},
  }};
  return parseName("op", s, kNames, "sum, prod, min, max, avg");
}

Collective parseCollective(std::string_view s) {
  static constexpr std::array<std::pair<std::string_view, Collective>, 12> kNames{{
      {"all_reduce", Collective::AllReduce},
      {"allreduce", Collective::AllReduce},
      {"reduce_scatter", Collective::ReduceScatter},
      {"reducescatter", Collective::ReduceScatter},
      {"all_gather", Collective::AllGather},
      {"allgather", Collective::AllGather},
      {"broadcast", Collective::Broadcast},
      {"bcast", Collective::Broadcast},
      {"reduce", Collective::Reduce},
      {"barrier", Collective::Barrier},
      {"all-reduce", Collective::AllReduce},
      {"reduce-scatter", Collective::ReduceScatter},
  }};
  if (lower(s) == "all-gather") return Collective::AllGather;
  return parseName("collective", s, kNames, "all_reduce, reduce_scatter, all_gather, broadcast, reduce, barrier");
}

std::size_t countForBytes(Collective kind, int nranks, std::size_t bytes, DType dtype, std::size_t alignBytes) {
  const std::size_t es = dtypeSize(dtype);
  const std::size_t count = bytes / es;
  if (kind != Collective::ReduceScatter && kind != Collective::AllGather) return count;
  const std::size_t align = std::max<std::size_t>(1, alignBytes / es);
  return (count / (static_cast<std::size_t>(std::max(nranks, 1)) * align)) * align;
}

std::size_t CollectiveSpec::inputBytes() const {
  const std::size_t b = count * elementSize();
  switch (kind) {
    case Collective::ReduceScatter:
      return b * static_cast<std::size_t>(nranks);
    case Collective::Barrier:
      return 0;
    default:
      return b;
  }
}

std::size_t CollectiveSpec::outputBytes() const {
  const std::size_t b = count * elementSize();
  switch (kind) {
    case Collective::AllGather:
      return b * static_cast<std::size_t>(nranks);
    case Collective::Barrier:
      return 0;
    default:
      return b;
  }
}

std::size_t CollectiveSpec::inPlaceInputOffset(int rank) const {
  return kind == Collective::AllGather ? static_cast<std::size_t>(rank) * count * elementSize() : 0;
}

std::size_t CollectiveSpec::inPlaceOutputOffset(int rank) const {
  return kind == Collective::ReduceScatter ? static_cast<std::size_t>(rank) * count * elementSize() : 0;
}

bool CollectiveSpec::reduces() const {
  return kind == Collective::AllReduce || kind == Collective::ReduceScatter || kind == Collective::Reduce;
}

std::string describe(const CollectiveSpec& s) {
  return fmt::format("{}(n={}, count={}, {}, {}, root={})", toString(s.kind), s.nranks, s.count, toString(s.dtype),
                     toString(s.op), s.root);
}

double busBandwidthFactor(Collective c, int nranks) {
  switch (c) {
    case Collective::AllReduce:
      return 2.0 * (nranks - 1) / nranks;
    case Collective::ReduceScatter:
    case Collective::AllGather:
      return static_cast<double>(nranks - 1) / nranks;
    default:
      return 1.0;
  }
}

}  // namespace collbench
