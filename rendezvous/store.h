#pragma once
/// collbench's rendezvous store: a small key-value service that the chief serves at its cluster-spec address so
/// that processes can exchange transport addresses before they are connected (gloo::rendezvous::Store semantics:
/// set, get and wait with timeouts). Plain sockets; no Gloo headers, so tests and tools can use it directly.
///
/// Wire format (all integers little-endian), one request then one reply at a time per connection:
///   request  u32 magic 'CBST' | u16 version | u8 op | u8 reserved (0) | u16 token length | u16 key length |
///            u32 value length | u32 timeout ms | token | key | value
///   reply    u32 magic 'CBSR' | u16 version | u8 status | u8 reserved (0) | u32 payload length | payload
/// The payload of an Ok reply to Get is the value; of an error reply, the reason in words. Every length is bounded
/// (kMaxStore*Bytes) and checked before anything is allocated, so a hostile or broken peer can at worst get its own
/// connection closed: the server logs why and keeps serving everyone else.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace collbench::host {

inline constexpr std::uint32_t kStoreRequestMagic = 0x54534243;  // "CBST" as bytes on the wire
inline constexpr std::uint32_t kStoreReplyMagic = 0x52534243;    // "CBSR"
inline constexpr std::uint16_t kStoreProtocolVersion = 1;
/// Limits: the token is a secret string, keys are short names, values hold transport addresses (tens of bytes
/// per rank), so 1 MiB is generous even for thousands of ranks.
inline constexpr std::size_t kMaxStoreTokenBytes = 256;
inline constexpr std::size_t kMaxStoreKeyBytes = 1024;
inline constexpr std::size_t kMaxStoreValueBytes = 1 << 20;
inline constexpr std::size_t kStoreRequestHeaderBytes = 20;
inline constexpr std::size_t kStoreReplyHeaderBytes = 12;

enum class StoreOp : std::uint8_t { Set = 1, Get = 2, Wait = 3 };
enum class StoreStatus : std::uint8_t { Ok = 0, Timeout = 1, BadFrame = 2, BadVersion = 3, BadToken = 4, Full = 5 };
std::string_view toString(StoreStatus s);

struct StoreRequest {
  StoreOp op = StoreOp::Get;
  std::uint32_t timeoutMs = 0;  ///< Get/Wait: how long the server holds the request for a missing key
  std::string token;
  std::string key;
  std::vector<char> value;  ///< Set only
};

/// One encoded request frame. Throws Error{InvalidArgument} when a field exceeds its limit.
std::vector<std::byte> encodeRequest(const StoreRequest& r);
/// Encodes a request with an arbitrary version (tests of the server's refusal).
std::vector<std::byte> encodeRequest(const StoreRequest& r, std::uint16_t version);

/// Result of parsing the front of a byte stream.
struct StoreParse {
  enum class Kind { NeedMore, Ok, Bad };
  Kind kind = Kind::NeedMore;
  std::size_t consumed = 0;              ///< bytes of the frame (Ok only)
  StoreRequest request;                  ///< Ok only; the token is not checked here
  StoreStatus status = StoreStatus::Ok;  ///< Bad: BadFrame or BadVersion
  std::string reason;                    ///< Bad: what was wrong, for the log
};
/// Parses one request frame at the front of `data`: NeedMore while it is incomplete, Bad as soon as the header
/// shows a wrong magic, version, op, reserved byte or an over-limit length (before the rest has arrived).
/// Never reads outside `data` and never allocates more than the limits.
StoreParse parseRequest(std::span<const std::byte> data);

/// Reply frame and its parser (used by the client; same bounds).
std::vector<std::byte> encodeReply(StoreStatus status, std::span<const char> payload);
struct StoreReplyParse {
  enum class Kind { NeedMore, Ok, Bad };
  Kind kind = Kind::NeedMore;
  std::size_t consumed = 0;
  StoreStatus status = StoreStatus::Ok;
  std::vector<char> payload;
  std::string reason;  ///< Bad: what was wrong with the reply frame
};
StoreReplyParse parseReply(std::span<const std::byte> data);

/// Equal-length-independent comparison of secrets, so the time taken does not reveal a matching prefix.
bool constantTimeEquals(std::string_view a, std::string_view b);

/// Counters the server keeps (tests assert on them; the log says the same in words).
struct StoreServerStats {
  std::uint64_t accepted = 0;        ///< connections accepted
  std::uint64_t requests = 0;        ///< well-formed requests with the right token
  std::uint64_t refusedToken = 0;    ///< connections closed for a wrong token
  std::uint64_t refusedVersion = 0;  ///< ... for a protocol version other than ours
  std::uint64_t refusedFrame = 0;    ///< ... for a malformed, over-limit or truncated frame
};

/// The store server: one thread, poll(2) over non-blocking sockets, listening only on the given address.
/// Destruction stops the thread and closes every connection.
class StoreServer {
 public:
  /// How long a connection may sit on an incomplete frame before it is dropped as truncated.
  static constexpr std::chrono::milliseconds kPartialFrameTimeout{5000};
  /// Connections beyond this are accepted and closed at once (logged), so descriptors cannot run out.
  static constexpr std::size_t kMaxConnections = 1024;
  /// Total bytes of stored values; Set beyond it is refused (Full).
  static constexpr std::size_t kMaxStoredBytes = 256u << 20;

  /// Binds host:port (port 0: any free port, see port()). Throws Error{BackendError} naming the address when the
  /// bind fails (in use, not a local address).
  StoreServer(const std::string& host, int port, std::string token,
              std::chrono::milliseconds partialFrameTimeout = kPartialFrameTimeout);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  StoreServerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A client connection to a StoreServer. Calls are serialised (one request at a time); thread safe.
class StoreClient {
 public:
  /// Connects, retrying refused connections until `connectTimeout` (the server may start later than us).
  /// Throws Error{Timeout} naming the address when nobody answers in time.
  StoreClient(std::string host, int port, std::string token, std::chrono::milliseconds connectTimeout);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  /// The value, or nullopt when the key did not appear within `timeout`.
  std::optional<std::vector<char>> get(const std::string& key, std::chrono::milliseconds timeout);
  /// True when the key exists (or appears within `timeout`).
  bool wait(const std::string& key, std::chrono::milliseconds timeout);

  /// "host:port" for messages.
  const std::string& address() const { return address_; }

 private:
  /// Sends one request and reads its reply; throws Error naming the server on I/O errors and refusals.
  StoreReplyParse roundTrip(const StoreRequest& r, std::chrono::milliseconds replyWithin);

  std::string host_;
  int port_;
  std::string token_;
  std::string address_;
  std::mutex mutex_;
  int fd_ = -1;
};

}  // namespace collbench::host
