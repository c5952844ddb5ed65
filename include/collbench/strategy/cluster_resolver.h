#pragma once
/// Cluster resolvers in the manner of tf.distribute.cluster_resolver: they say which tasks make up the cluster,
/// which of them this process is, and who leads. MultiWorkerMirroredStrategy-style code asks a resolver for
/// numWorkers(), rank(), isChief() and leaderAddress(); it never reads TF_CONFIG or Slurm variables itself.
///
/// Rules (TensorFlow's multi_worker_util, see /work/shared/reference/mwms-semantics.md):
///   - An empty cluster spec (no jobs) is single-worker mode: one worker, rank 0, chief, master() "".
///   - Replicas are the chief and worker tasks: numWorkers() = #chief + #worker. With a chief job the chief is
///     rank 0 and worker i is rank i + 1; without one worker i is rank i and worker 0 is the chief.
///   - An evaluator forms its own one-worker cluster (rank 0, numWorkers() 1, chief, no leader).
///   - A ps task is not a replica: rank() throws.
///   - The leader is chief 0 if there is a chief job, else worker 0.
///
/// Every resolver validates its input when constructed and throws Error{Errc::InvalidArgument} with a one-line
/// message naming the input (TF_CONFIG, SLURM_JOB_NODELIST, ...), the field and the value, for example
///   TF_CONFIG: cluster.worker[0] "host1:port": port "port" is not a number in 1..65535
/// so that a resolver that exists is a consistent one. All ranks of a job must resolve the same cluster spec;
/// that is the launcher's promise (TF_CONFIG differing only in task), not something a resolver can check.
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collbench::strategy {

/// Job name -> ordered task addresses ("host:port"); task i of a job is jobs.at(job)[i].
/// Known job names are kJobNames. A job may be present with zero tasks (TensorFlow keeps such jobs).
struct ClusterSpec {
  static constexpr std::string_view kChief = "chief";
  static constexpr std::string_view kWorker = "worker";
  static constexpr std::string_view kPs = "ps";
  static constexpr std::string_view kEvaluator = "evaluator";
  /// The allowed job names, in the order collbench reports and validates them.
  static constexpr std::array<std::string_view, 4> kJobNames = {kChief, kWorker, kPs, kEvaluator};

  std::map<std::string, std::vector<std::string>, std::less<>> jobs;

  bool empty() const { return jobs.empty(); }  ///< no jobs at all: single-worker mode
  bool hasJob(std::string_view job) const { return jobs.find(job) != jobs.end(); }
  int numTasks(std::string_view job) const;  ///< 0 when the job is absent
  int totalTasks() const;                    ///< over all jobs
  /// Address of task `index` of `job`; throws Error{InvalidArgument} naming job and index when there is none.
  const std::string& taskAddress(std::string_view job, int index) const;
  /// Compact JSON object, jobs in kJobNames order then any others: {"chief":["a:1"],"worker":["b:1","c:1"]}.
  std::string toJson() const;
  /// Builds a spec from the text of a JSON object such as TF_CONFIG's "cluster": each job is a list of address
  /// strings, or an object {"0": addr, "1": addr, ...} whose keys are exactly 0..n-1 (sparse jobs are rejected).
  /// Checks structure only (see validateClusterSpec for job names and addresses); errors name `source`.
  static ClusterSpec fromJson(std::string_view jsonText, std::string_view source = "cluster spec");

  bool operator==(const ClusterSpec&) const = default;
};

/// "host:port" split. Hosts are names or IPv4 literals ([A-Za-z0-9._-]) or bracketed IPv6 literals "[::1]".
struct HostPort {
  std::string host;  ///< brackets of an IPv6 literal removed
  int port = 0;      ///< 1..65535
};
/// Parses "host:port" (port decimal, 1..65535; IPv6 as "[::1]:80"). `what` prefixes the error, which then names
/// the value and the reason, e.g. `TF_CONFIG: cluster.worker[0] "host1:port": port "port" is not a number ...`.
HostPort parseHostPort(std::string_view address, std::string_view what);

/// How a resolver names its input in messages.
struct ClusterInputNames {
  std::string source = "cluster spec";  ///< "TF_CONFIG", "SimpleClusterResolver", ...
  std::string typeField = "task_type";  ///< "task.type" for TF_CONFIG
  std::string indexField = "task_id";   ///< "task.index" for TF_CONFIG
};

/// Validates a non-empty spec against this task, in TensorFlow's order, then collbench's stricter checks:
///   1 a job name other than chief/worker/ps/evaluator; 2 an unknown task type; 3 a task type with no job in the
///   cluster (evaluator exempt); 4 more than one chief; 5 more than one evaluator; 6 a task index >= the number
///   of tasks of its job; then (collbench only) 7 a negative task index; 8 an address that is not host:port with
///   port 1..65535; 9 the same address twice anywhere in the cluster.
/// Throws Error{InvalidArgument} naming names.source, the field and the value. An empty spec is always valid.
void validateClusterSpec(const ClusterSpec& spec, std::string_view taskType, int taskId,
                         const ClusterInputNames& names = {});

/// A cluster and this process's place in it. Subclasses provide the four accessors (validated at construction);
/// everything else is derived from them with TensorFlow's rules, identically for every resolver.
class ClusterResolver {
 public:
  virtual ~ClusterResolver() = default;

  /// The cluster; empty in single-worker mode.
  virtual const ClusterSpec& clusterSpec() const = 0;
  /// This task's job: "chief", "worker", "ps" or "evaluator" ("worker" in single-worker mode).
  virtual const std::string& taskType() const = 0;
  /// This task's index within its job (0 in single-worker mode).
  virtual int taskId() const = 0;
  /// Protocol prefix for master() ("grpc"), "" for none.
  virtual const std::string& rpcLayer() const = 0;
  /// This task's index among the tasks on its host, where the launcher says (Slurm, MPI); nullopt otherwise.
  virtual std::optional<int> localRank() const { return std::nullopt; }
  /// Number of tasks on this task's host, where the launcher says; nullopt otherwise.
  virtual std::optional<int> localSize() const { return std::nullopt; }
  /// The input in messages: "TF_CONFIG", "SimpleClusterResolver", "Slurm", "MPI".
  virtual std::string_view source() const = 0;

  /// Chief + worker tasks (1 for an evaluator and in single-worker mode).
  int numWorkers() const;
  /// Replica group rank: chief 0, worker i -> i + #chief; evaluator 0. Throws Error{InvalidArgument} for ps.
  int rank() const;
  /// Chief task, worker 0 when there is no chief job, the evaluator, and single-worker mode.
  bool isChief() const;
  /// numWorkers() > 1 (TensorFlow's _in_multi_worker_mode).
  bool isMultiWorker() const;
  /// "host:port" of the leader (chief 0, else worker 0); "" in single-worker mode, for an evaluator, or when the
  /// cluster has neither job.
  std::string leaderAddress() const;
  /// The leader's address with "<layer>://" prepended, layer = `rpcLayerOverride` if non-empty else rpcLayer()
  /// (TensorFlow's format_master_url). "" when the cluster has at most one task and for an evaluator.
  std::string master(std::string_view rpcLayerOverride = {}) const;
  /// This task's own address; "" in single-worker mode or when the resolver does not know it.
  std::string taskAddress() const;
};

/// Environment access, injectable so tests never touch the process environment: name -> value, nullopt if unset.
using EnvLookup = std::function<std::optional<std::string>(const char*)>;
/// Reads the real process environment (getenv).
EnvLookup systemEnvironment();
/// A fixed environment, for tests and for tools that forward a launcher's variables.
EnvLookup environmentFromMap(std::map<std::string, std::string> vars);

/// TF_CONFIG, TensorFlow's JSON: {"cluster": {job: [addr...]}, "task": {"type": t, "index": i}, "rpc_layer": r}.
///   - "{}", no "cluster" or an empty cluster: single-worker mode; "task" is then type-checked but ignored.
///   - Not JSON (the empty string included) or not an object: error.
///   - task.type is taken as a string (a non-string is shown as JSON and fails as an unknown type); task.index is
///     an integer or a string holding one ("1" is 1, "abc" is an error; floats and booleans are errors).
///   - A non-empty cluster needs both task.type and task.index.
///   - Then validateClusterSpec with fields "cluster.<job>[<i>]", "task.type", "task.index".
/// collbench is stricter than TensorFlow about addresses: TF's own example {"worker": ["host1:port", ...]} is
/// rejected naming cluster.worker[0] and "host1:port", because "port" is not a port number.
/// Top-level keys other than cluster, task, rpc_layer, environment and session_master are ignored with a warning.
class TFConfigClusterResolver : public ClusterResolver {
 public:
  static constexpr const char* kEnvVar = "TF_CONFIG";
  /// Parses the JSON text of TF_CONFIG. Throws Error{InvalidArgument} naming "TF_CONFIG", the field and value.
  explicit TFConfigClusterResolver(std::string_view tfConfigJson);
  /// Reads TF_CONFIG from `env`; unset is "{}" (single-worker mode).
  static TFConfigClusterResolver fromEnvironment(const EnvLookup& env = systemEnvironment());

  const ClusterSpec& clusterSpec() const override { return spec_; }
  const std::string& taskType() const override { return taskType_; }
  int taskId() const override { return taskId_; }
  const std::string& rpcLayer() const override { return rpcLayer_; }
  std::string_view source() const override { return kEnvVar; }

 private:
  ClusterSpec spec_;
  std::string taskType_;
  int taskId_ = 0;
  std::string rpcLayer_;
};

/// The TF_CONFIG a launcher gives task `taskIndex` of job `taskType` of `spec` (the writer of the format
/// TFConfigClusterResolver reads): compact JSON {"cluster":<spec.toJson()>,"task":{"index":<i>,"type":"<t>"}}.
/// Writes what it is given; the resolver reading it back validates it.
std::string tfConfigJson(const ClusterSpec& spec, std::string_view taskType, int taskIndex);

/// A cluster given in code. An empty spec is single-worker mode (taskType and taskId are then ignored); otherwise
/// validateClusterSpec applies with fields "cluster.<job>[<i>]", "task_type", "task_id".
class SimpleClusterResolver : public ClusterResolver {
 public:
  SimpleClusterResolver(ClusterSpec spec, std::string taskType, int taskId, std::string rpcLayer = "");
  /// Single-worker mode.
  static SimpleClusterResolver singleWorker() { return SimpleClusterResolver(ClusterSpec{}, "worker", 0); }

  const ClusterSpec& clusterSpec() const override { return spec_; }
  const std::string& taskType() const override { return taskType_; }
  int taskId() const override { return taskId_; }
  const std::string& rpcLayer() const override { return rpcLayer_; }
  std::string_view source() const override { return "SimpleClusterResolver"; }

 private:
  ClusterSpec spec_;
  std::string taskType_;
  int taskId_ = 0;
  std::string rpcLayer_;
};

/// Expands a Slurm hostlist: "gpu[01-04,07],cpu3" -> gpu01 gpu02 gpu03 gpu04 gpu07 cpu3. Ranges keep the lower
/// bound's width ("[08-10]" -> 08 09 10); several bracket groups in one name expand as a product, leftmost
/// outermost ("a[1-2]b[3-4]" -> a1b3 a1b4 a2b3 a2b4). Nested brackets, unbalanced brackets, empty names or
/// ranges, descending ranges and lists of more than kMaxSlurmHosts names are errors naming `source` and the value.
std::vector<std::string> expandSlurmHostlist(std::string_view hostlist, std::string_view source = "SLURM_JOB_NODELIST");
inline constexpr int kMaxSlurmHosts = 1 << 20;
/// Parses Slurm's tasks-per-node syntax: "2(x3),1" -> 2 2 2 1. Counts must be >= 1.
std::vector<int> parseSlurmTasksPerNode(std::string_view value, std::string_view source = "SLURM_TASKS_PER_NODE");

/// Options for SlurmClusterResolver.
struct SlurmOptions {
  static constexpr int kDefaultPortBase = 8888;  ///< TensorFlow's SlurmClusterResolver port_base
  int portBase = kDefaultPortBase;               ///< task with local id l listens on portBase + l
  std::string rpcLayer = "grpc";                 ///< TensorFlow's SlurmClusterResolver default
};

/// A Slurm step: one worker job with a task per Slurm task, rank = SLURM_PROCID, no chief (worker 0 leads).
/// Variables, each first found wins:
///   rank          SLURM_PROCID (required)
///   task count    SLURM_STEP_NUM_TASKS, SLURM_NTASKS (else the sum of tasks per node)
///   hosts         SLURM_STEP_NODELIST, SLURM_JOB_NODELIST (required; hostlist syntax, each host once)
///   tasks/host    SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE ("2(x3),1"), SLURM_NTASKS_PER_NODE (one count
///                 for every host), else Slurm's default block split (the first ntasks % nhosts hosts get one more)
///   local id      SLURM_LOCALID (optional; checked against the block assignment)
/// Tasks are assigned to hosts block-wise in rank order (Slurm's default distribution); task r on host h with
/// local id l has address h:(portBase + l). Cyclic distributions are detected through SLURM_LOCALID and rejected.
class SlurmClusterResolver : public ClusterResolver {
 public:
  explicit SlurmClusterResolver(const EnvLookup& env = systemEnvironment(), SlurmOptions options = {});

  const ClusterSpec& clusterSpec() const override { return spec_; }
  const std::string& taskType() const override { return taskType_; }
  int taskId() const override { return taskId_; }
  const std::string& rpcLayer() const override { return rpcLayer_; }
  std::optional<int> localRank() const override { return localRank_; }
  std::optional<int> localSize() const override { return localSize_; }
  std::string_view source() const override { return "Slurm"; }
  /// The expanded host of each rank.
  const std::vector<std::string>& hostOfRank() const { return hostOfRank_; }

 private:
  ClusterSpec spec_;
  std::string taskType_ = std::string(ClusterSpec::kWorker);
  int taskId_ = 0;
  std::string rpcLayer_;
  int localRank_ = 0;
  int localSize_ = 1;
  std::vector<std::string> hostOfRank_;
};

/// Options for MpiClusterResolver.
struct MpiOptions {
  std::string rpcLayer;  ///< prefix for master(); none by default
};

/// The largest world size MpiClusterResolver accepts (the spec holds an address per rank).
inline constexpr int kMaxMpiRanks = 1 << 20;

/// An MPI launch (mpirun / mpiexec): one worker job, rank and size from the launcher, worker 0 leads.
///   Open MPI     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
///   MPICH/Hydra  PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (used when OMPI_COMM_WORLD_RANK is unset)
///   leader       COLLBENCH_MASTER_ADDR ("host:port", default kDefaultMasterAddr)
/// MPI launchers do not publish the other ranks' addresses: the cluster spec's worker 0 is the master address
/// and the other workers' addresses are "" (unknown). A multi-host launch with the loopback default logs a
/// warning. Local rank and size are known when the launcher sets them. A world size above kMaxMpiRanks is an error.
class MpiClusterResolver : public ClusterResolver {
 public:
  static constexpr const char* kMasterAddrVar = "COLLBENCH_MASTER_ADDR";
  static constexpr const char* kDefaultMasterAddr = "127.0.0.1:29500";
  explicit MpiClusterResolver(const EnvLookup& env = systemEnvironment(), MpiOptions options = {});

  const ClusterSpec& clusterSpec() const override { return spec_; }
  const std::string& taskType() const override { return taskType_; }
  int taskId() const override { return taskId_; }
  const std::string& rpcLayer() const override { return rpcLayer_; }
  std::optional<int> localRank() const override { return localRank_; }
  std::optional<int> localSize() const override { return localSize_; }
  std::string_view source() const override { return "MPI"; }

 private:
  ClusterSpec spec_;
  std::string taskType_ = std::string(ClusterSpec::kWorker);
  int taskId_ = 0;
  std::string rpcLayer_;
  std::optional<int> localRank_;
  std::optional<int> localSize_;
};

/// TF_CONFIG if set (even to something invalid: that is an error, not a fallback), else Slurm if SLURM_PROCID is
/// set, else MPI if OMPI_COMM_WORLD_RANK or PMI_RANK is set, else single-worker mode.
std::unique_ptr<ClusterResolver> makeClusterResolverFromEnvironment(const EnvLookup& env = systemEnvironment(),
                                                                    const SlurmOptions& slurm = {},
                                                                    const MpiOptions& mpi = {});

}  // namespace collbench::strategy
