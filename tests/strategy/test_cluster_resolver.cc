#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "collbench/error.h"
#include "collbench/strategy/cluster_resolver.h"

namespace collbench::strategy {
namespace {

/// `s` in double quotes, as messages quote values.
std::string q(std::string_view s) { return fmt::format("\"{}\"", s); }

/// Runs `fn`, expects Error{InvalidArgument} with a one-line message holding every substring of `parts`.
void expectError(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument) << e.what();
    std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message spans lines: " << message;
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << message << "\n  lacks: " << part;
    return;
  }
  ADD_FAILURE() << "no collbench::Error thrown";
}

void expectTfConfigError(const std::string& tfConfig, std::initializer_list<std::string> parts) {
  SCOPED_TRACE(tfConfig);
  expectError([&] { TFConfigClusterResolver r(tfConfig); }, parts);
}

void expectSingleWorker(const ClusterResolver& r) {
  EXPECT_TRUE(r.clusterSpec().empty());
  EXPECT_EQ(r.taskType(), "worker");
  EXPECT_EQ(r.taskId(), 0);
  EXPECT_EQ(r.numWorkers(), 1);
  EXPECT_EQ(r.rank(), 0);
  EXPECT_TRUE(r.isChief());
  EXPECT_FALSE(r.isMultiWorker());
  EXPECT_EQ(r.master(), "");
  EXPECT_EQ(r.master("grpc"), "");
  EXPECT_EQ(r.leaderAddress(), "");
  EXPECT_EQ(r.taskAddress(), "");
}

/// TF_CONFIG with a cluster (JSON object text) and a task.
std::string tfConfig(const std::string& cluster, const std::string& type, const std::string& index) {
  return R"({"cluster": )" + cluster + R"(, "task": {"type": ")" + type + R"(", "index": )" + index + "}}";
}

const std::string kChiefCluster = R"({"chief": ["c:1000"], "worker": ["w0:1000", "w1:1000"]})";
const std::string kWorkerCluster = R"({"worker": ["host1:1000", "host2:1000", "host3:1000"]})";

// ------------------------------------------------------------------------------------------------------------------
// ClusterSpec

TEST(ClusterSpec, Helpers) {
  ClusterSpec spec;
  spec.jobs["worker"] = {"b:1", "c:1"};
  spec.jobs["chief"] = {"a:1"};
  spec.jobs["ps"] = {};
  EXPECT_FALSE(spec.empty());
  EXPECT_EQ(spec.numTasks("worker"), 2);
  EXPECT_EQ(spec.numTasks("chief"), 1);
  EXPECT_EQ(spec.numTasks("ps"), 0);
  EXPECT_EQ(spec.numTasks("evaluator"), 0);
  EXPECT_TRUE(spec.hasJob("ps"));
  EXPECT_FALSE(spec.hasJob("evaluator"));
  EXPECT_EQ(spec.totalTasks(), 3);
  EXPECT_EQ(spec.taskAddress("worker", 1), "c:1");
  expectError([&] { (void)spec.taskAddress("worker", 2); }, {"\"worker\"", "2"});
  expectError([&] { (void)spec.taskAddress("evaluator", 0); }, {"\"evaluator\""});
  // kJobNames order, not alphabetical.
  EXPECT_EQ(spec.toJson(), R"({"chief":["a:1"],"worker":["b:1","c:1"],"ps":[]})");
  EXPECT_EQ(ClusterSpec{}.toJson(), "{}");
  EXPECT_TRUE(ClusterSpec{}.empty());
}

TEST(ClusterSpec, FromJsonRoundTripsAndAcceptsDenseObjects) {
  ClusterSpec spec = ClusterSpec::fromJson(R"({"worker": ["b:1", "c:1"], "chief": ["a:1"]})");
  EXPECT_EQ(ClusterSpec::fromJson(spec.toJson()), spec);
  ClusterSpec dense = ClusterSpec::fromJson(R"({"worker": {"1": "c:1", "0": "b:1"}})");
  EXPECT_EQ(dense.jobs.at("worker"), (std::vector<std::string>{"b:1", "c:1"}));
}

TEST(ClusterSpec, FromJsonStructureErrors) {
  expectError([] { ClusterSpec::fromJson("{", "spec.json"); }, {"spec.json", "malformed JSON"});
  expectError([] { ClusterSpec::fromJson("[]"); }, {"cluster must be an object", "array"});
  expectError([] { ClusterSpec::fromJson(R"({"worker": "a:1"})"); }, {"cluster.worker", "list", "\"a:1\""});
  expectError([] { ClusterSpec::fromJson(R"({"worker": ["a:1", 7]})"); }, {"cluster.worker[1]", "7"});
  expectError([] { ClusterSpec::fromJson(R"({"worker": {"0": "a:1", "2": "b:1"}})"); },
              {"cluster.worker", "sparse", "no task 1"});
  expectError([] { ClusterSpec::fromJson(R"({"worker": {"x": "a:1"}})"); }, {"cluster.worker", "\"x\""});
  expectError([] { ClusterSpec::fromJson(R"({"worker": {"0": "a:1", "00": "b:1"}})"); }, {"cluster.worker", "\"00\""});
}

// ------------------------------------------------------------------------------------------------------------------
// Addresses

TEST(HostPort, AcceptsNamesIpv4AndBracketedIpv6) {
  HostPort a = parseHostPort("host-1.example.com:8888", "x");
  EXPECT_EQ(a.host, "host-1.example.com");
  EXPECT_EQ(a.port, 8888);
  EXPECT_EQ(parseHostPort("10.0.0.1:1", "x").port, 1);
  EXPECT_EQ(parseHostPort("h:65535", "x").port, 65535);
  HostPort v6 = parseHostPort("[::1]:80", "x");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 80);
  EXPECT_EQ(parseHostPort("[fe80::1:2]:2222", "x").host, "fe80::1:2");
  EXPECT_EQ(parseHostPort("[::ffff:10.0.0.1]:5", "x").host, "::ffff:10.0.0.1");
}

TEST(HostPort, RejectsMalformedAddressesNamingWhatAndValue) {
  struct Case {
    std::string address;
    std::string reason;
  };
  for (const Case& c : std::vector<Case>{{"", "empty address"},
                                         {"host", "no port"},
                                         {"host:", "port \"\""},
                                         {"host:port", "port \"port\""},
                                         {"host:0", "port \"0\""},
                                         {"host:65536", "port \"65536\""},
                                         {"host:99999999999999999999", "1..65535"},
                                         {"host:+80", "port \"+80\""},
                                         {"host:-1", "port \"-1\""},
                                         {"host:8 ", "port \"8 \""},
                                         {":80", "empty host"},
                                         {"::1:80", "brackets"},
                                         {"ho st:80", "invalid character \" \""},
                                         {"h/x:80", "invalid character \"/\""},
                                         {"[::1]", "no port"},
                                         {"[::1:80", "unclosed"},
                                         {"[]:80", "not an IPv6 address"},
                                         {"[host]:80", "not an IPv6 address"},
                                         {"[::1]:0", "1..65535"}}) {
    SCOPED_TRACE(c.address);
    expectError([&] { parseHostPort(c.address, "TF_CONFIG: cluster.worker[3]"); },
                {"TF_CONFIG: cluster.worker[3]", q(c.address), c.reason});
  }
}

// ------------------------------------------------------------------------------------------------------------------
// TF_CONFIG: single-worker mode

TEST(TFConfig, UnsetEmptyObjectNoClusterOrEmptyClusterIsSingleWorker) {
  expectSingleWorker(TFConfigClusterResolver::fromEnvironment(environmentFromMap({})));
  for (const char* text : {"{}", " { } ", R"({"task": {"type": "worker", "index": 3}})", R"({"cluster": {}})",
                           R"({"cluster": {}, "task": {"type": "ps", "index": 0}, "rpc_layer": "grpc"})"}) {
    SCOPED_TRACE(text);
    TFConfigClusterResolver r(text);
    expectSingleWorker(r);
    EXPECT_EQ(r.source(), "TF_CONFIG");
  }
}

TEST(TFConfig, SingleWorkerStillTypeChecksTheTask) {
  expectTfConfigError(R"({"task": {"type": "worker", "index": "abc"}})", {"task.index", "\"abc\""});
  expectTfConfigError(R"({"task": []})", {"TF_CONFIG", "task must be an object"});
}

TEST(TFConfig, InvalidJsonIsAnError) {
  expectTfConfigError("{", {"TF_CONFIG", "malformed JSON", "\"{\""});
  expectTfConfigError(R"({"cluster": {"worker": ["a:1",]}})", {"TF_CONFIG", "malformed JSON"});
  expectTfConfigError("", {"TF_CONFIG", "empty"});
  expectTfConfigError("   ", {"TF_CONFIG", "empty"});
  expectTfConfigError("[]", {"TF_CONFIG", "must be a JSON object", "array"});
  expectTfConfigError("null", {"TF_CONFIG", "must be a JSON object"});
  expectTfConfigError(R"({"cluster": null})", {"TF_CONFIG", "cluster must be an object", "null"});
  expectTfConfigError(R"({"cluster": {"worker": [1]}, "task": {"type": "worker", "index": 0}})",
                      {"TF_CONFIG", "cluster.worker[0]", "number"});
}

TEST(TFConfig, FromEnvironmentReadsTfConfig) {
  auto r = TFConfigClusterResolver::fromEnvironment(
      environmentFromMap({{"TF_CONFIG", tfConfig(kWorkerCluster, "worker", "2")}}));
  EXPECT_EQ(r.rank(), 2);
  expectError(
      [] {
        TFConfigClusterResolver::fromEnvironment(environmentFromMap({{"TF_CONFIG", "nope"}}));
      },
      {"TF_CONFIG", "malformed JSON"});
}

// ------------------------------------------------------------------------------------------------------------------
// TF_CONFIG: the seed example and ranks

TEST(TFConfig, SeedExampleWithNonNumericPortsIsRejected) {
  // TensorFlow's documentation example: TF accepts "port" literally (it checks no syntax); collbench needs a port
  // number, so the first address is reported by field and value.
  expectTfConfigError(
      R"({"cluster": {"worker": ["host1:port", "host2:port", "host3:port"]}, "task": {"type": "worker", "index": 1}})",
      {"TF_CONFIG", "cluster.worker[0]", "\"host1:port\"", "port \"port\"", "1..65535"});
}

TEST(TFConfig, SeedExampleWithNumericPorts) {
  TFConfigClusterResolver r(tfConfig(kWorkerCluster, "worker", "1"));
  EXPECT_EQ(r.taskType(), "worker");
  EXPECT_EQ(r.taskId(), 1);
  EXPECT_EQ(r.rank(), 1);
  EXPECT_EQ(r.numWorkers(), 3);
  EXPECT_TRUE(r.isMultiWorker());
  EXPECT_FALSE(r.isChief());
  EXPECT_EQ(r.leaderAddress(), "host1:1000");  // no chief job: worker 0 is the chief and leader
  EXPECT_EQ(r.master(), "host1:1000");
  EXPECT_EQ(r.taskAddress(), "host2:1000");
  EXPECT_EQ(r.rpcLayer(), "");
  EXPECT_EQ(r.localRank(), std::nullopt);
  EXPECT_EQ(r.localSize(), std::nullopt);
  EXPECT_EQ(r.clusterSpec().numTasks("worker"), 3);

  TFConfigClusterResolver w0(tfConfig(kWorkerCluster, "worker", "0"));
  EXPECT_TRUE(w0.isChief());
  EXPECT_EQ(w0.rank(), 0);
  TFConfigClusterResolver w2(tfConfig(kWorkerCluster, "worker", "2"));
  EXPECT_FALSE(w2.isChief());
  EXPECT_EQ(w2.rank(), 2);
}

TEST(TFConfig, WrittenConfigIsReadBackAsTheSameClusterAndTask) {
  // What `collbench launch` gives rank 1 of two workers: the exact text, then the resolver's reading of it.
  ClusterSpec workers;
  workers.jobs["worker"] = {"127.0.0.1:4000", "127.0.0.1:4001"};
  const std::string text = tfConfigJson(workers, ClusterSpec::kWorker, 1);
  EXPECT_EQ(text, R"({"cluster":{"worker":["127.0.0.1:4000","127.0.0.1:4001"]},"task":{"index":1,"type":"worker"}})");
  const TFConfigClusterResolver r(text);
  EXPECT_EQ(r.clusterSpec(), workers);
  EXPECT_EQ(r.taskType(), "worker");
  EXPECT_EQ(r.taskId(), 1);
  EXPECT_EQ(r.rank(), 1);
  EXPECT_EQ(r.taskAddress(), "127.0.0.1:4001");

  // Every job, each task of it.
  ClusterSpec full;
  full.jobs["chief"] = {"c:1"};
  full.jobs["worker"] = {"w:1", "w:2"};
  full.jobs["ps"] = {"p:1"};
  full.jobs["evaluator"] = {"e:1"};
  for (const auto& [job, tasks] : full.jobs) {
    for (int i = 0; i < static_cast<int>(tasks.size()); ++i) {
      const TFConfigClusterResolver back(tfConfigJson(full, job, i));
      EXPECT_EQ(back.clusterSpec(), full) << job << " " << i;
      EXPECT_EQ(back.taskType(), job);
      EXPECT_EQ(back.taskId(), i);
    }
  }
}

TEST(TFConfig, ChiefIsRankZeroAndWorkersFollow) {
  TFConfigClusterResolver chief(tfConfig(kChiefCluster, "chief", "0"));
  EXPECT_EQ(chief.rank(), 0);
  EXPECT_TRUE(chief.isChief());
  EXPECT_EQ(chief.numWorkers(), 3);
  EXPECT_EQ(chief.leaderAddress(), "c:1000");
  for (int i = 0; i < 2; ++i) {
    TFConfigClusterResolver w(tfConfig(kChiefCluster, "worker", std::to_string(i)));
    EXPECT_EQ(w.rank(), i + 1);
    EXPECT_FALSE(w.isChief()) << "worker 0 is not the chief when there is a chief job";
    EXPECT_EQ(w.numWorkers(), 3);
    EXPECT_EQ(w.leaderAddress(), "c:1000");
    EXPECT_EQ(w.master(), "c:1000");
    EXPECT_TRUE(w.isMultiWorker());
  }
}

TEST(TFConfig, ChiefOnlyClusterIsOneWorker) {
  TFConfigClusterResolver r(tfConfig(R"({"chief": ["c:1"]})", "chief", "0"));
  EXPECT_EQ(r.numWorkers(), 1);
  EXPECT_FALSE(r.isMultiWorker());
  EXPECT_EQ(r.leaderAddress(), "c:1");
  EXPECT_EQ(r.master(), "") << "one task in the cluster";
}

TEST(TFConfig, EvaluatorFormsItsOwnCluster) {
  const std::string cluster = R"({"chief": ["c:1"], "worker": ["w:1", "w:2"], "evaluator": ["e:1"]})";
  TFConfigClusterResolver e(tfConfig(cluster, "evaluator", "0"));
  EXPECT_EQ(e.rank(), 0);
  EXPECT_EQ(e.numWorkers(), 1);
  EXPECT_TRUE(e.isChief());
  EXPECT_FALSE(e.isMultiWorker());
  EXPECT_EQ(e.leaderAddress(), "");
  EXPECT_EQ(e.master(), "");
  EXPECT_EQ(e.taskAddress(), "e:1");
  // The evaluator does not count as a worker for the others.
  EXPECT_EQ(TFConfigClusterResolver(tfConfig(cluster, "worker", "1")).numWorkers(), 3);
  // An evaluator need not be in the cluster (TensorFlow's exemption).
  TFConfigClusterResolver outside(tfConfig(R"({"worker": ["w:1", "w:2"]})", "evaluator", "0"));
  EXPECT_EQ(outside.rank(), 0);
  EXPECT_EQ(outside.numWorkers(), 1);
  EXPECT_EQ(outside.taskAddress(), "");
}

TEST(TFConfig, PsHasNoRank) {
  TFConfigClusterResolver ps(tfConfig(R"({"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1", "p:2"]})", "ps", "1"));
  expectError([&] { (void)ps.rank(); }, {"TF_CONFIG", "ps", "no rank"});
  EXPECT_FALSE(ps.isChief());
  EXPECT_EQ(ps.numWorkers(), 2);
  EXPECT_EQ(ps.leaderAddress(), "c:1");
  EXPECT_EQ(ps.taskAddress(), "p:2");
}

// ------------------------------------------------------------------------------------------------------------------
// TF_CONFIG: task fields

TEST(TFConfig, IndexAsStringOfDigitsIsAccepted) {
  EXPECT_EQ(TFConfigClusterResolver(tfConfig(kWorkerCluster, "worker", R"("1")")).rank(), 1);
  EXPECT_EQ(TFConfigClusterResolver(tfConfig(kWorkerCluster, "worker", R"(" 2 ")")).rank(), 2);
  EXPECT_EQ(TFConfigClusterResolver(tfConfig(kWorkerCluster, "worker", R"("+0")")).rank(), 0);
}

TEST(TFConfig, IndexThatIsNotAnIntegerIsAnError) {
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", R"("abc")"),
                      {"TF_CONFIG", "task.index", "\"abc\"", "integer"});
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", R"("1.0")"), {"task.index", "\"1.0\""});
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", R"("")"), {"task.index", "\"\""});
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", "1.5"), {"task.index", "1.5"});
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", "true"), {"task.index", "true"});
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", "null"), {"task.index", "null"});
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", "[1]"), {"task.index", "[1]"});
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", "4294967296"), {"task.index", "4294967296", "out of range"});
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", "-4294967296"), {"task.index", "-4294967296", "out of range"});
}

TEST(TFConfig, NegativeIndexIsAnError) {
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", "-1"), {"TF_CONFIG", "task.index", "-1", "negative"});
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", R"("-1")"), {"task.index", "-1", "negative"});
  expectTfConfigError(tfConfig(kWorkerCluster, "evaluator", "-1"), {"task.index", "-1", "negative"});
}

TEST(TFConfig, TypeIsTakenAsAString) {
  expectTfConfigError(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": 1, "index": 0}})",
                      {"TF_CONFIG", "task.type", "\"1\"", "not a task type"});
  expectTfConfigError(tfConfig(kWorkerCluster, "", "0"), {"task.type", "\"\"", "not a task type"});
}

TEST(TFConfig, MultiWorkerNeedsTypeAndIndex) {
  expectTfConfigError(R"({"cluster": {"worker": ["a:1", "b:1"]}})",
                      {"TF_CONFIG", "task.type and task.index are missing"});
  expectTfConfigError(R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"index": 0}})", {"task.type is missing"});
  expectTfConfigError(R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker"}})",
                      {"task.index is missing"});
  // One task is still a cluster: TensorFlow enters multi-worker initialisation and needs the task.
  expectTfConfigError(R"({"cluster": {"worker": ["a:1"]}})", {"task.type and task.index are missing"});
}

TEST(TFConfig, IndexOutOfRange) {
  expectTfConfigError(tfConfig(kWorkerCluster, "worker", "3"),
                      {"TF_CONFIG", "task.index 3", "out of range", "\"worker\" has 3 tasks", "0..2"});
  expectTfConfigError(tfConfig(R"({"chief": ["c:1"], "worker": []})", "worker", "0"), {"task.index 0", "has 0 tasks"});
}

// ------------------------------------------------------------------------------------------------------------------
// TF_CONFIG: validation order (TensorFlow's, then collbench's stricter checks)

TEST(TFConfigValidation, EachCheckAlone) {
  expectTfConfigError(tfConfig(R"({"worker": ["a:1"], "master": ["m:1"]})", "worker", "0"),
                      {"cluster.master", "\"master\"", "chief, worker, ps, evaluator"});
  expectTfConfigError(tfConfig(kWorkerCluster, "master", "0"), {"task.type", "\"master\"", "not a task type"});
  expectTfConfigError(tfConfig(kWorkerCluster, "chief", "0"),
                      {"task.type", "\"chief\"", "no job in the cluster", "worker"});
  expectTfConfigError(tfConfig(kWorkerCluster, "ps", "0"), {"task.type", "\"ps\"", "no job"});
  expectTfConfigError(tfConfig(R"({"chief": ["c:1", "c:2"], "worker": ["w:1"]})", "worker", "0"),
                      {"cluster.chief", "2 tasks", "at most one chief"});
  expectTfConfigError(tfConfig(R"({"worker": ["w:1"], "evaluator": ["e:1", "e:2"]})", "worker", "0"),
                      {"cluster.evaluator", "2 tasks", "at most one evaluator"});
}

TEST(TFConfigValidation, EarlierChecksWin) {
  // 1 unknown job before 2 unknown task type.
  expectTfConfigError(tfConfig(R"({"worker": ["a:1"], "foo": ["f:1"]})", "bar", "0"), {"cluster.foo"});
  // 2 unknown task type before 4 two chiefs.
  expectTfConfigError(tfConfig(R"({"chief": ["c:1", "c:2"]})", "bar", "0"), {"task.type", "\"bar\""});
  // 3 task type not in cluster before 5 two evaluators.
  expectTfConfigError(tfConfig(R"({"worker": ["w:1"], "evaluator": ["e:1", "e:2"]})", "chief", "0"),
                      {"\"chief\"", "no job"});
  // 4 two chiefs before 5 two evaluators.
  expectTfConfigError(tfConfig(R"({"chief": ["c:1", "c:2"], "evaluator": ["e:1", "e:2"]})", "chief", "0"),
                      {"cluster.chief"});
  // 5 two evaluators before 6 index out of range.
  expectTfConfigError(tfConfig(R"({"worker": ["w:1"], "evaluator": ["e:1", "e:2"]})", "worker", "5"),
                      {"cluster.evaluator"});
  // 6 index out of range before collbench's address checks.
  expectTfConfigError(tfConfig(R"({"worker": ["bad", "bad"]})", "worker", "2"), {"task.index 2", "out of range"});
  // 7 negative index before 8 address syntax.
  expectTfConfigError(tfConfig(R"({"worker": ["bad"]})", "worker", "-1"), {"task.index -1", "negative"});
  // 8 address syntax before 9 duplicates, and addresses in chief, worker, ps, evaluator order.
  expectTfConfigError(tfConfig(R"({"worker": ["a:1", "a:1", "x"], "chief": ["c"]})", "worker", "0"),
                      {"cluster.chief[0]", "\"c\""});
  // Structure errors before task parsing, task parsing before the missing-field check and validation.
  expectTfConfigError(R"({"cluster": {"foo": [3]}, "task": {"type": "worker", "index": "abc"}})", {"cluster.foo[0]"});
  expectTfConfigError(R"({"cluster": {"foo": ["f:1"]}, "task": {"index": "abc"}})", {"task.index", "\"abc\""});
  expectTfConfigError(R"({"cluster": {"foo": ["f:1"]}})", {"missing"});
}

TEST(TFConfigValidation, DuplicateAddressesAcrossJobs) {
  expectTfConfigError(tfConfig(R"({"chief": ["a:1"], "worker": ["b:1", "a:1"]})", "worker", "0"),
                      {"TF_CONFIG", "cluster.worker[1]", "\"a:1\"", "duplicates cluster.chief[0]"});
  expectTfConfigError(tfConfig(R"({"worker": ["b:1", "b:1"]})", "worker", "0"),
                      {"cluster.worker[1]", "\"b:1\"", "duplicates cluster.worker[0]"});
  expectTfConfigError(tfConfig(R"({"worker": ["b:1"], "ps": ["p:1"], "evaluator": ["p:1"]})", "worker", "0"),
                      {"cluster.evaluator[0]", "duplicates cluster.ps[0]"});
  // Same host, different ports: fine.
  EXPECT_EQ(TFConfigClusterResolver(tfConfig(R"({"worker": ["b:1", "b:2"]})", "worker", "1")).rank(), 1);
}

TEST(TFConfigValidation, BadPortsNameTheField) {
  for (const char* address : {"w:0", "w:65536", "w:99999", "w:", "w:abc", "w"}) {
    expectTfConfigError(tfConfig(fmt::format(R"({{"worker": ["ok:1", "{}"]}})", address), "worker", "0"),
                        {"TF_CONFIG", "cluster.worker[1]", q(address)});
  }
  expectTfConfigError(tfConfig(R"({"worker": ["ok:1"], "ps": ["p:70000"]})", "worker", "0"),
                      {"cluster.ps[0]", "70000"});
}

TEST(TFConfigValidation, Ipv6AddressesNeedBrackets) {
  TFConfigClusterResolver r(tfConfig(R"({"worker": ["[::1]:2222", "[fe80::2]:2222"]})", "worker", "1"));
  EXPECT_EQ(r.leaderAddress(), "[::1]:2222");
  EXPECT_EQ(r.master("grpc"), "grpc://[::1]:2222");
  expectTfConfigError(tfConfig(R"({"worker": ["::1:2222"]})", "worker", "0"), {"cluster.worker[0]", "brackets"});
}

// ------------------------------------------------------------------------------------------------------------------
// TF_CONFIG: rpc_layer and master()

TEST(TFConfig, RpcLayerPrefixesMaster) {
  TFConfigClusterResolver r(
      R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, "task": {"type": "worker", "index": 0},
                                "rpc_layer": "grpc"})");
  EXPECT_EQ(r.rpcLayer(), "grpc");
  EXPECT_EQ(r.master(), "grpc://c:1");
  EXPECT_EQ(r.master("grpc+verbs"), "grpc+verbs://c:1");  // an explicit layer wins, as in TensorFlow
  EXPECT_EQ(r.leaderAddress(), "c:1");                    // never prefixed
  TFConfigClusterResolver plain(tfConfig(kWorkerCluster, "worker", "0"));
  EXPECT_EQ(plain.master(), "host1:1000");
  EXPECT_EQ(plain.master("grpc"), "grpc://host1:1000");
  TFConfigClusterResolver one(R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": 0},
                                  "rpc_layer": "grpc"})");
  EXPECT_EQ(one.master(), "");
  EXPECT_EQ(one.master("grpc"), "");
  EXPECT_EQ(one.leaderAddress(), "w:1");
}

TEST(TFConfig, RpcLayerMustBeAProtocolName) {
  expectTfConfigError(R"({"rpc_layer": 3})", {"TF_CONFIG", "rpc_layer", "3"});
  expectTfConfigError(R"({"rpc_layer": "gr pc"})", {"TF_CONFIG: rpc_layer", "\"gr pc\""});
  expectTfConfigError(R"({"rpc_layer": "://"})", {"rpc_layer", "\"://\""});
  EXPECT_EQ(TFConfigClusterResolver(R"({"rpc_layer": null})").rpcLayer(), "");
}

TEST(TFConfig, DenseObjectJobsAndIgnoredKeys) {
  TFConfigClusterResolver r(R"({"cluster": {"worker": {"1": "b:1", "0": "a:1"}}, "task": {"type": "worker", "index": 1},
                                "environment": "cloud", "extra": 1})");
  EXPECT_EQ(r.rank(), 1);
  EXPECT_EQ(r.leaderAddress(), "a:1");
  EXPECT_EQ(r.taskAddress(), "b:1");
}

// ------------------------------------------------------------------------------------------------------------------
// SimpleClusterResolver

ClusterSpec chiefSpec() {
  ClusterSpec spec;
  spec.jobs["chief"] = {"c:1"};
  spec.jobs["worker"] = {"w:1", "w:2"};
  return spec;
}

TEST(Simple, SameRulesAsTfConfig) {
  SimpleClusterResolver w(chiefSpec(), "worker", 1, "grpc");
  EXPECT_EQ(w.rank(), 2);
  EXPECT_EQ(w.numWorkers(), 3);
  EXPECT_FALSE(w.isChief());
  EXPECT_EQ(w.master(), "grpc://c:1");
  EXPECT_EQ(w.source(), "SimpleClusterResolver");
  SimpleClusterResolver c(chiefSpec(), "chief", 0);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_TRUE(c.isChief());
  EXPECT_EQ(c.master(), "c:1");
  expectSingleWorker(SimpleClusterResolver(ClusterSpec{}, "ps", 7));
  expectSingleWorker(SimpleClusterResolver::singleWorker());
}

TEST(Simple, ValidationNamesSimpleFields) {
  expectError([] { SimpleClusterResolver(chiefSpec(), "", 0); }, {"SimpleClusterResolver", "task_type", "missing"});
  expectError([] { SimpleClusterResolver(chiefSpec(), "worker", -1); },
              {"SimpleClusterResolver", "task_id -1", "negative"});
  expectError([] { SimpleClusterResolver(chiefSpec(), "worker", 2); }, {"task_id 2", "out of range"});
  expectError([] { SimpleClusterResolver(chiefSpec(), "boss", 0); }, {"task_type", "\"boss\""});
  expectError([] { SimpleClusterResolver(chiefSpec(), "ps", 0); }, {"task_type", "\"ps\"", "no job"});
  ClusterSpec bad = chiefSpec();
  bad.jobs["worker"][1] = "w:port";
  expectError([&] { SimpleClusterResolver(bad, "worker", 0); },
              {"SimpleClusterResolver: cluster.worker[1]", "\"w:port\""});
  ClusterSpec dup = chiefSpec();
  dup.jobs["worker"][1] = "c:1";
  expectError([&] { SimpleClusterResolver(dup, "worker", 0); }, {"cluster.worker[1]", "duplicates cluster.chief[0]"});
  ClusterSpec unknown = chiefSpec();
  unknown.jobs["master"] = {"m:1"};
  expectError([&] { SimpleClusterResolver(unknown, "worker", 0); }, {"cluster.master"});
  expectError([] { SimpleClusterResolver(chiefSpec(), "worker", 0, "g rpc"); }, {"rpc_layer", "\"g rpc\""});
}

TEST(Simple, ValidateClusterSpecIsUsableDirectly) {
  EXPECT_NO_THROW(validateClusterSpec(ClusterSpec{}, "anything", -5));
  EXPECT_NO_THROW(validateClusterSpec(chiefSpec(), "worker", 1));
  expectError([] { validateClusterSpec(chiefSpec(), "worker", 9, {"my.json", "role", "id"}); }, {"my.json", "id 9"});
}

// ------------------------------------------------------------------------------------------------------------------
// Slurm hostlists

using Hosts = std::vector<std::string>;

TEST(SlurmHostlist, Expands) {
  EXPECT_EQ(expandSlurmHostlist("gpu[01-04,07],cpu3"), (Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"}));
  EXPECT_EQ(expandSlurmHostlist("node1"), (Hosts{"node1"}));
  EXPECT_EQ(expandSlurmHostlist("a,b,c"), (Hosts{"a", "b", "c"}));
  EXPECT_EQ(expandSlurmHostlist("n[08-10]"), (Hosts{"n08", "n09", "n10"}));
  EXPECT_EQ(expandSlurmHostlist("n[9-11]"), (Hosts{"n9", "n10", "n11"}));
  EXPECT_EQ(expandSlurmHostlist("n[001-002,010]"), (Hosts{"n001", "n002", "n010"}));
  EXPECT_EQ(expandSlurmHostlist("n[1-2]-ib"), (Hosts{"n1-ib", "n2-ib"}));
  EXPECT_EQ(expandSlurmHostlist("a[1-2]b[3-4]"), (Hosts{"a1b3", "a1b4", "a2b3", "a2b4"}));
  EXPECT_EQ(expandSlurmHostlist("rack[1-2]-n[1,3],login.cluster.org"),
            (Hosts{"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3", "login.cluster.org"}));
  EXPECT_EQ(expandSlurmHostlist("x[5]"), (Hosts{"x5"}));
  EXPECT_EQ(expandSlurmHostlist("  a[1-2]\n"), (Hosts{"a1", "a2"}));
  EXPECT_EQ(expandSlurmHostlist("n[0-4095]").size(), 4096u);
}

TEST(SlurmHostlist, ErrorsNameTheVariableAndValue) {
  struct Case {
    std::string list;
    std::string reason;
  };
  for (const Case& c : std::vector<Case>{{"", "empty hostlist"},
                                         {"gpu[1-", "unclosed"},
                                         {"gpu[1-2", "unclosed"},
                                         {"gpu[[1-2]]", "nested"},
                                         {"gpu1]", "without '['"},
                                         {"gpu[]", "empty range list"},
                                         {"gpu[3-1]", "descending"},
                                         {"gpu[1-2,]", "empty range"},
                                         {"gpu[a-b]", "\"a-b\""},
                                         {"gpu[1-2-3]", "\"1-2-3\""},
                                         {"gpu[-3]", "\"-3\""},
                                         {"a,,b", "empty host name"},
                                         {"a,", "empty host name"},
                                         {",a", "empty host name"},
                                         {"a b", "invalid character"},
                                         {"a[1-2]:x", "invalid character \":\""},
                                         {"n[0-99999999]", "more than"},
                                         {"n[0-9999]m[0-9999]", "more than"},
                                         {"n[0-99999999999]", "\"0-99999999999\""}}) {
    SCOPED_TRACE(c.list);
    expectError([&] { expandSlurmHostlist(c.list, "SLURM_JOB_NODELIST"); },
                {"SLURM_JOB_NODELIST", q(c.list), c.reason});
  }
}

TEST(SlurmTasksPerNode, Parses) {
  EXPECT_EQ(parseSlurmTasksPerNode("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(parseSlurmTasksPerNode("4"), (std::vector<int>{4}));
  EXPECT_EQ(parseSlurmTasksPerNode("1,3(x2)"), (std::vector<int>{1, 3, 3}));
  for (const char* bad : {"", "0", "2(x)", "2(x0)", "2x3", "2(x3", "(x3)", "2,,1", "-1", "a"}) {
    SCOPED_TRACE(bad);
    expectError([&] { parseSlurmTasksPerNode(bad, "SLURM_TASKS_PER_NODE"); }, {"SLURM_TASKS_PER_NODE", q(bad)});
  }
}

// ------------------------------------------------------------------------------------------------------------------
// SlurmClusterResolver

using Env = std::map<std::string, std::string>;

Env slurmEnv(int procId) {
  return {{"SLURM_PROCID", std::to_string(procId)},
          {"SLURM_NTASKS", "4"},
          {"SLURM_JOB_NODELIST", "n[1-2]"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"}};
}

TEST(Slurm, BlockAssignmentWithPortsFromTheBase) {
  Env env = slurmEnv(3);
  env["SLURM_LOCALID"] = "1";
  SlurmClusterResolver r(environmentFromMap(env));
  EXPECT_EQ(r.clusterSpec().jobs.at("worker"), (Hosts{"n1:8888", "n1:8889", "n2:8888", "n2:8889"}));
  EXPECT_EQ(r.clusterSpec().jobs.size(), 1u);
  EXPECT_EQ(r.taskType(), "worker");
  EXPECT_EQ(r.taskId(), 3);
  EXPECT_EQ(r.rank(), 3);
  EXPECT_EQ(r.numWorkers(), 4);
  EXPECT_EQ(r.localRank(), 1);
  EXPECT_EQ(r.localSize(), 2);
  EXPECT_FALSE(r.isChief());
  EXPECT_TRUE(r.isMultiWorker());
  EXPECT_EQ(r.leaderAddress(), "n1:8888");
  EXPECT_EQ(r.master(), "grpc://n1:8888");  // TensorFlow's SlurmClusterResolver default rpc_layer
  EXPECT_EQ(r.taskAddress(), "n2:8889");
  EXPECT_EQ(r.hostOfRank(), (Hosts{"n1", "n1", "n2", "n2"}));
  EXPECT_EQ(r.source(), "Slurm");

  SlurmClusterResolver r0(environmentFromMap(slurmEnv(0)));
  EXPECT_TRUE(r0.isChief());
  EXPECT_EQ(r0.rank(), 0);
  EXPECT_EQ(r0.localRank(), 0);
}

TEST(Slurm, UnevenTasksPerNodeAndOptions) {
  Env env = {{"SLURM_PROCID", "5"},
             {"SLURM_NTASKS", "7"},
             {"SLURM_JOB_NODELIST", "gpu[01-03],cpu3"},
             {"SLURM_TASKS_PER_NODE", "2(x3),1"}};
  SlurmClusterResolver r(environmentFromMap(env), SlurmOptions{9000, ""});
  EXPECT_EQ(r.clusterSpec().jobs.at("worker"),
            (Hosts{"gpu01:9000", "gpu01:9001", "gpu02:9000", "gpu02:9001", "gpu03:9000", "gpu03:9001", "cpu3:9000"}));
  EXPECT_EQ(r.rank(), 5);
  EXPECT_EQ(r.localRank(), 1);
  EXPECT_EQ(r.master(), "gpu01:9000");
}

TEST(Slurm, StepVariablesWinOverJobVariables) {
  Env env = slurmEnv(1);
  env["SLURM_STEP_NODELIST"] = "s[1-2]";
  env["SLURM_STEP_NUM_TASKS"] = "2";
  env["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)";
  SlurmClusterResolver r(environmentFromMap(env));
  EXPECT_EQ(r.clusterSpec().jobs.at("worker"), (Hosts{"s1:8888", "s2:8888"}));
  EXPECT_EQ(r.localSize(), 1);
}

TEST(Slurm, TasksPerNodeFallbacks) {
  // SLURM_NTASKS_PER_NODE: one count for every host.
  Env a = {{"SLURM_PROCID", "2"}, {"SLURM_JOB_NODELIST", "a,b"}, {"SLURM_NTASKS_PER_NODE", "2"}};
  SlurmClusterResolver ra(environmentFromMap(a));
  EXPECT_EQ(ra.numWorkers(), 4);
  EXPECT_EQ(ra.taskAddress(), "b:8888");
  // Only SLURM_NTASKS: Slurm's block split, the first hosts get the extra tasks (5 over 2 -> 3, 2).
  Env b = {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "5"}, {"SLURM_JOB_NODELIST", "a,b"}};
  SlurmClusterResolver rb(environmentFromMap(b));
  EXPECT_EQ(rb.clusterSpec().jobs.at("worker"), (Hosts{"a:8888", "a:8889", "a:8890", "b:8888", "b:8889"}));
  EXPECT_EQ(rb.localRank(), 0);
  EXPECT_EQ(rb.localSize(), 2);
  // One task: single replica, no master.
  Env c = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_NODELIST", "solo"}};
  SlurmClusterResolver rc(environmentFromMap(c));
  EXPECT_EQ(rc.numWorkers(), 1);
  EXPECT_FALSE(rc.isMultiWorker());
  EXPECT_EQ(rc.master(), "");
  EXPECT_EQ(rc.leaderAddress(), "solo:8888");
}

TEST(Slurm, Errors) {
  auto expectSlurmError = [](Env env, std::initializer_list<std::string> parts, SlurmOptions options = {}) {
    expectError([&] { SlurmClusterResolver r(environmentFromMap(env), options); }, parts);
  };
  Env env = slurmEnv(0);
  env.erase("SLURM_PROCID");
  expectSlurmError(env, {"SLURM_PROCID", "not set"});
  env = slurmEnv(0);
  env["SLURM_PROCID"] = "x";
  expectSlurmError(env, {"SLURM_PROCID", "\"x\""});
  env["SLURM_PROCID"] = "-1";
  expectSlurmError(env, {"SLURM_PROCID", "\"-1\""});
  expectSlurmError(slurmEnv(4), {"SLURM_PROCID 4", "out of range", "4 tasks"});
  env = slurmEnv(0);
  env.erase("SLURM_JOB_NODELIST");
  expectSlurmError(env, {"SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "is set"});
  env = slurmEnv(0);
  env["SLURM_JOB_NODELIST"] = "n[2-1]";
  expectSlurmError(env, {"SLURM_JOB_NODELIST", "\"n[2-1]\"", "descending"});
  env["SLURM_JOB_NODELIST"] = "n1,n[1-2]";
  expectSlurmError(env, {"SLURM_JOB_NODELIST", "host \"n1\" appears twice"});
  env = slurmEnv(0);
  env["SLURM_TASKS_PER_NODE"] = "2(x3)";
  expectSlurmError(env, {"SLURM_TASKS_PER_NODE", "\"2(x3)\"", "3 hosts", "SLURM_JOB_NODELIST", "has 2"});
  env["SLURM_TASKS_PER_NODE"] = "2,1";
  expectSlurmError(env, {"SLURM_TASKS_PER_NODE", "\"2,1\"", "3 tasks", "SLURM_NTASKS is 4"});
  env["SLURM_TASKS_PER_NODE"] = "2(y2)";
  expectSlurmError(env, {"SLURM_TASKS_PER_NODE", "\"2(y2)\""});
  env = slurmEnv(1);
  env["SLURM_LOCALID"] = "0";  // cyclic distribution: task 1 on the second host
  expectSlurmError(env, {"SLURM_LOCALID 0", "block", "local task 1"});
  env = slurmEnv(0);
  env["SLURM_NTASKS"] = "0";
  expectSlurmError(env, {"SLURM_NTASKS", "\"0\""});
  env = {{"SLURM_PROCID", "0"}, {"SLURM_JOB_NODELIST", "a"}};
  expectSlurmError(env, {"number of tasks", "SLURM_NTASKS"});
  expectSlurmError(slurmEnv(0), {"port base 0"}, SlurmOptions{0, "grpc"});
  expectSlurmError(slurmEnv(0), {"port base 65535", "65535"}, SlurmOptions{65535, "grpc"});
  expectSlurmError(slurmEnv(0), {"rpc_layer", "\"a b\""}, SlurmOptions{8888, "a b"});
}

// ------------------------------------------------------------------------------------------------------------------
// MpiClusterResolver

TEST(Mpi, OpenMpiVariables) {
  Env env = {{"OMPI_COMM_WORLD_RANK", "2"},
             {"OMPI_COMM_WORLD_SIZE", "4"},
             {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
             {"COLLBENCH_MASTER_ADDR", "10.0.0.1:1234"},
             {"PMI_RANK", "3"},
             {"PMI_SIZE", "9"}};
  MpiClusterResolver r(environmentFromMap(env));
  EXPECT_EQ(r.rank(), 2);
  EXPECT_EQ(r.taskId(), 2);
  EXPECT_EQ(r.taskType(), "worker");
  EXPECT_EQ(r.numWorkers(), 4);
  EXPECT_EQ(r.localRank(), 0);
  EXPECT_EQ(r.localSize(), 2);
  EXPECT_FALSE(r.isChief());
  EXPECT_TRUE(r.isMultiWorker());
  EXPECT_EQ(r.leaderAddress(), "10.0.0.1:1234");
  EXPECT_EQ(r.master(), "10.0.0.1:1234");
  EXPECT_EQ(r.master("grpc"), "grpc://10.0.0.1:1234");
  EXPECT_EQ(r.taskAddress(), "") << "MPI does not publish other ranks' addresses";
  EXPECT_EQ(r.clusterSpec().numTasks("worker"), 4);
  EXPECT_EQ(r.source(), "MPI");
}

TEST(Mpi, PmiVariablesAndDefaultMaster) {
  MpiClusterResolver r(environmentFromMap({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}), MpiOptions{"grpc"});
  EXPECT_EQ(r.rank(), 0);
  EXPECT_TRUE(r.isChief());
  EXPECT_EQ(r.numWorkers(), 2);
  EXPECT_EQ(r.localRank(), std::nullopt);
  EXPECT_EQ(r.localSize(), std::nullopt);
  EXPECT_EQ(r.leaderAddress(), "127.0.0.1:29500");
  EXPECT_EQ(r.master(), "grpc://127.0.0.1:29500");
  EXPECT_EQ(r.taskAddress(), "127.0.0.1:29500");
  MpiClusterResolver hydra(
      environmentFromMap({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}}));
  EXPECT_EQ(hydra.localRank(), 1);
  EXPECT_EQ(hydra.localSize(), 2);
  MpiClusterResolver one(environmentFromMap({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}}));
  EXPECT_EQ(one.master(), "");
  EXPECT_FALSE(one.isMultiWorker());
  // A multi-host launch with the loopback default only warns.
  MpiClusterResolver multiHost(environmentFromMap(
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(multiHost.leaderAddress(), "127.0.0.1:29500");
}

TEST(Mpi, Errors) {
  auto expectMpiError = [](Env env, std::initializer_list<std::string> parts) {
    expectError([&] { MpiClusterResolver r(environmentFromMap(env)); }, parts);
  };
  expectMpiError({}, {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "is set"});
  expectMpiError({{"OMPI_COMM_WORLD_RANK", "0"}}, {"OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"});
  expectMpiError({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, {"OMPI_COMM_WORLD_RANK", "\"x\""});
  expectMpiError({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
                 {"OMPI_COMM_WORLD_RANK 2", "out of range", "OMPI_COMM_WORLD_SIZE is 2"});
  expectMpiError({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}, {"PMI_SIZE", "\"0\""});
  expectMpiError({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"COLLBENCH_MASTER_ADDR", "head"}},
                 {"COLLBENCH_MASTER_ADDR", "\"head\"", "no port"});
  expectMpiError({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"COLLBENCH_MASTER_ADDR", "head:0"}},
                 {"COLLBENCH_MASTER_ADDR", "\"head:0\""});
  expectMpiError({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                 {"OMPI_COMM_WORLD_LOCAL_RANK 2", "out of range"});
  expectMpiError({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE 3", "exceeds"});
  // Found by ResolverFuzz.MpiEnvironment: a corrupt size allocated an address per rank (2^31 of them).
  expectMpiError({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2147483647"}},
                 {"OMPI_COMM_WORLD_SIZE 2147483647", "more than 1048576 ranks"});
}

// ------------------------------------------------------------------------------------------------------------------
// makeClusterResolverFromEnvironment

TEST(FromEnvironment, PicksTfConfigThenSlurmThenMpiThenSingleWorker) {
  Env all = slurmEnv(1);
  all["TF_CONFIG"] = tfConfig(kWorkerCluster, "worker", "2");
  all["OMPI_COMM_WORLD_RANK"] = "0";
  all["OMPI_COMM_WORLD_SIZE"] = "8";
  auto r = makeClusterResolverFromEnvironment(environmentFromMap(all));
  EXPECT_EQ(r->source(), "TF_CONFIG");
  EXPECT_EQ(r->rank(), 2);

  all.erase("TF_CONFIG");
  r = makeClusterResolverFromEnvironment(environmentFromMap(all));
  EXPECT_EQ(r->source(), "Slurm");
  EXPECT_EQ(r->rank(), 1);
  EXPECT_EQ(r->numWorkers(), 4);

  all.erase("SLURM_PROCID");
  r = makeClusterResolverFromEnvironment(environmentFromMap(all));
  EXPECT_EQ(r->source(), "MPI");
  EXPECT_EQ(r->numWorkers(), 8);

  r = makeClusterResolverFromEnvironment(environmentFromMap({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}}));
  EXPECT_EQ(r->source(), "MPI");
  EXPECT_EQ(r->rank(), 1);

  r = makeClusterResolverFromEnvironment(environmentFromMap({{"SLURM_JOB_NODELIST", "a"}, {"PATH", "/bin"}}));
  EXPECT_EQ(r->source(), "SimpleClusterResolver");
  expectSingleWorker(*r);
}

TEST(FromEnvironment, InvalidTfConfigIsAnErrorNotAFallback) {
  Env env = slurmEnv(0);
  env["TF_CONFIG"] = "{not json";
  expectError([&] { makeClusterResolverFromEnvironment(environmentFromMap(env)); }, {"TF_CONFIG", "malformed JSON"});
  env["TF_CONFIG"] = "";
  expectError([&] { makeClusterResolverFromEnvironment(environmentFromMap(env)); }, {"TF_CONFIG", "empty"});
  env["TF_CONFIG"] = "{}";
  expectSingleWorker(*makeClusterResolverFromEnvironment(environmentFromMap(env)));
}

TEST(FromEnvironment, OptionsReachTheResolvers) {
  auto r = makeClusterResolverFromEnvironment(environmentFromMap(slurmEnv(0)), SlurmOptions{7000, ""});
  EXPECT_EQ(r->master(), "n1:7000");
  r = makeClusterResolverFromEnvironment(environmentFromMap({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}), {},
                                         MpiOptions{"grpc"});
  EXPECT_EQ(r->master(), "grpc://127.0.0.1:29500");
}

TEST(FromEnvironment, SystemEnvironmentReadsGetenv) {
  // PATH is set in any test environment; a made-up name is not.
  EXPECT_TRUE(systemEnvironment()("PATH").has_value());
  EXPECT_FALSE(systemEnvironment()("COLLBENCH_SURELY_UNSET_VARIABLE_42").has_value());
}

}  // namespace
}  // namespace collbench::strategy
