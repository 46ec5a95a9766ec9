// Host-emulation transport: control over a Unix stream socket at a path, rows in POSIX shared
// memory that the trainer created (mode 0600, unique names) and names in add_table.
//
// Security: the socket's directory must be owned by this user and closed to others (0700);
// the socket itself is created 0600; a peer must be this user (SO_PEERCRED) and its first
// message must be HELLO carrying the random token of the token file, else it is refused.
//
// Regions are opened through the trainer's own view of /dev/shm, /proc/PID/root/dev/shm/NAME
// (PID from SO_PEERCRED, its /proc folder held open from the hello on, so a reused pid is never
// followed), so an agent outside the trainer's mount namespace (an emulated machine's private
// /dev/shm, a container) maps the trainer's memory. Each must be a regular file of the peer's
// uid with mode 0600, large enough for its table. shm_open (this process's /dev/shm) is used
// only where /proc is not mounted here, or the peer's pid is not visible (another pid namespace).
#include "shm_transport.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>

namespace sni {
namespace agent {
namespace {

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

class ShmTransport : public Transport {
public:
    static constexpr double kHelloTimeout = 5.0;    // a new peer must authenticate this fast
    static constexpr double kMessageTimeout = 10.0;  // a started message must complete this fast

    ShmTransport(const std::string& path, const std::string& token, bool once) : path_(path), token_(token), once_(once) {
        if (token_.size() != proto::kTokenBytes) throw std::runtime_error("the token must be 32 bytes");
        const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
        struct stat st;
        if (stat(dir.empty() ? "/" : dir.c_str(), &st) != 0)
            throw std::runtime_error("socket directory " + dir + ": " + std::strerror(errno));
        if (st.st_uid != geteuid() || (st.st_mode & 077) != 0)
            throw std::runtime_error("socket directory " + dir + " must be owned by this user with mode 0700 (others may not enter it)");
        sockaddr_un addr{};
        if (path.size() >= sizeof(addr.sun_path)) throw std::runtime_error("socket path too long: " + path);
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
        listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (listen_fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
        struct stat old;
        if (lstat(path.c_str(), &old) == 0 && S_ISSOCK(old.st_mode)) unlink(path.c_str());
        const mode_t mask = umask(0177);
        const int rc = bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
        umask(mask);
        if (rc != 0) throw std::runtime_error("bind " + path + ": " + std::strerror(errno));
        bound_ = true;
        if (chmod(path.c_str(), 0600) != 0 || listen(listen_fd_, 4) != 0)
            throw std::runtime_error("listen " + path + ": " + std::strerror(errno));
    }

    ~ShmTransport() override {
        end_peer();
        if (listen_fd_ >= 0) close(listen_fd_);
        if (bound_) unlink(path_.c_str());
    }

    bool next_peer() override {
        if (served_ && once_) return false;
        while (!g_stop) {
            pollfd p{listen_fd_, POLLIN, 0};
            const int r = poll(&p, 1, 200);
            if (r < 0 && errno != EINTR) { log(std::string("poll: ") + std::strerror(errno)); return false; }
            if (r <= 0) continue;
            const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) continue;
            if (authenticate(fd)) {
                fd_ = fd;
                served_ = true;
                return true;
            }
            close(fd);
        }
        return false;
    }

    Recv recv(proto::Header* h, std::vector<uint8_t>* payload) override {
        uint8_t hb[sizeof(proto::Header)];
        const int got = read_full(fd_, hb, sizeof hb, -1.0, true);
        if (got == 0) return kClosed;
        std::string err;
        if (got < 0) { log("connection closed: header incomplete within " + std::to_string(kMessageTimeout) + " s"); return kMalformed; }
        if (!proto::parse_request_header(hb, sizeof hb, h, &err)) { log("malformed message, closing the connection: " + err); return kMalformed; }
        payload->resize(h->length);
        if (h->length && read_full(fd_, payload->data(), h->length, kMessageTimeout, false) <= 0) {
            log("connection closed: payload of " + op_name(*h) + " incomplete");
            return kMalformed;
        }
        return kMessage;
    }

    bool send(const proto::Header& h, const uint8_t* payload) override {
        return write_full(fd_, &h, sizeof h) && (h.length == 0 || write_full(fd_, payload, h.length));
    }

    void attach(uint32_t table, uint64_t rows, uint32_t dim, const proto::Blob* regions) override {
        if (maps_.count(table)) throw TransportError("table " + std::to_string(table) + " is already attached");
        Table& t = maps_[table];
        for (int k = 0; k < static_cast<int>(proto::kNumRegions); ++k) {
            const std::string name(reinterpret_cast<const char*>(regions[k].data), regions[k].size);
            if (!valid_name(name)) { maps_.erase(table); throw TransportError("region " + std::to_string(k) + ": invalid shared-memory name"); }
            const uint64_t need = region_bytes(static_cast<Region>(k), rows, dim);
            std::string where, err;
            const int fd = open_region(name, &where, &err);
            if (fd < 0) { release(t); maps_.erase(table); throw TransportError(err); }
            struct stat st;
            if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != peer_uid_ || (st.st_mode & 07777) != 0600) {
                close(fd);
                release(t);
                maps_.erase(table);
                throw TransportError("shared memory " + where + " must be a regular file of uid " + std::to_string(peer_uid_) +
                                     " (the trainer) with mode 0600");
            }
            if (static_cast<uint64_t>(st.st_size) < need) {
                close(fd);
                release(t);
                maps_.erase(table);
                throw TransportError("shared memory " + where + " is smaller than the " + std::to_string(need) + " bytes its table needs");
            }
            void* p = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (p == MAP_FAILED) { release(t); maps_.erase(table); throw TransportError("mmap " + name + ": " + std::strerror(errno)); }
            t.addr[k] = static_cast<uint8_t*>(p);
            t.size[k] = need;
        }
    }

    void read(uint32_t table, Region r, void* dst, uint64_t bytes) override {
        const Table& t = get(table, r, bytes);
        std::memcpy(dst, t.addr[r], bytes);
    }

    void write(uint32_t table, Region r, const void* src, uint64_t bytes) override {
        Table& t = get(table, r, bytes);
        std::memcpy(t.addr[r], src, bytes);
    }

    void end_peer() override {
        for (auto& kv : maps_) release(kv.second);
        maps_.clear();
        if (fd_ >= 0) close(fd_);
        fd_ = -1;
        if (peer_proc_ >= 0) close(peer_proc_);
        peer_proc_ = -1;
        peer_pid_ = 0;
        peer_proc_errno_ = 0;
    }

private:
    struct Table {
        uint8_t* addr[proto::kNumRegions] = {};
        uint64_t size[proto::kNumRegions] = {};
    };

    static std::string op_name(const proto::Header& h) { return proto::op_name(h.op); }

    static bool valid_name(const std::string& n) {
        if (n.size() < 2 || n.size() > 250 || n[0] != '/' || n == "/." || n == "/..") return false;
        for (size_t i = 1; i < n.size(); ++i) {
            const char c = n[i];
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
        }
        return true;
    }

    // An fd of the trainer's region `name` (valid_name: "/" then no '/'), O_RDWR, not following a
    // final symlink; -1 with *err set. *where: the path opened, for messages.
    int open_region(const std::string& name, std::string* where, std::string* err) const {
        int fd;
        if (peer_proc_ >= 0) {
            *where = "/proc/" + std::to_string(peer_pid_) + "/root/dev/shm" + name;
            fd = openat(peer_proc_, ("root/dev/shm" + name).c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        } else if (peer_proc_errno_ != 0) {  // /proc is here, but the trainer's folder could not be opened
            *where = "/proc/" + std::to_string(peer_pid_);
            errno = peer_proc_errno_;
            fd = -1;
        } else {  // no /proc here, or the trainer's pid is not visible: this process's /dev/shm
            *where = name;
            fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
        }
        if (fd < 0) *err = (peer_proc_ >= 0 || peer_proc_errno_ ? "open " : "shm_open ") + *where + ": " + std::strerror(errno);
        return fd;
    }

    // Hold the /proc folder of the authenticated peer (pid from SO_PEERCRED), or note why not.
    void open_peer_proc(pid_t pid) {
        peer_pid_ = pid;
        peer_proc_errno_ = 0;
        if (pid <= 0) return;  // not visible in this pid namespace: shm_open
        struct stat st;
        if (stat("/proc/self", &st) != 0 && errno == ENOENT) return;  // no /proc mounted: shm_open
        peer_proc_ = open(("/proc/" + std::to_string(pid)).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (peer_proc_ < 0) peer_proc_errno_ = errno ? errno : EIO;
    }

    static void release(Table& t) {
        for (uint32_t k = 0; k < proto::kNumRegions; ++k)
            if (t.addr[k]) { munmap(t.addr[k], t.size[k]); t.addr[k] = nullptr; }
    }

    Table& get(uint32_t table, Region r, uint64_t bytes) {
        auto it = maps_.find(table);
        if (it == maps_.end()) throw TransportError("no regions attached for table " + std::to_string(table));
        if (bytes > it->second.size[r]) throw TransportError("access of " + std::to_string(bytes) + " bytes beyond region " + std::to_string(r));
        return it->second;
    }

    bool authenticate(int fd) {
        ucred cred{};
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) {
            log("refused a connection from uid " + std::to_string(cred.uid) + " (only this user may connect)");
            return false;
        }
        uint8_t buf[sizeof(proto::Header) + proto::kTokenBytes];
        if (read_full(fd, buf, sizeof(proto::Header), kHelloTimeout, false) <= 0) { log("refused a connection: no hello"); return false; }
        proto::Header h;
        std::string err;
        if (!proto::parse_request_header(buf, sizeof(proto::Header), &h, &err) || h.op != proto::kHello) {
            log("refused a connection: " + (err.empty() ? std::string("first message is not hello") : err));
            return false;
        }
        if (read_full(fd, buf + sizeof(proto::Header), proto::kTokenBytes, kHelloTimeout, false) <= 0) { log("refused a connection: hello truncated"); return false; }
        uint8_t diff = 0;
        for (uint32_t i = 0; i < proto::kTokenBytes; ++i) diff |= buf[sizeof(proto::Header) + i] ^ static_cast<uint8_t>(token_[i]);
        if (diff != 0) {
            const std::string msg = "wrong token";
            log("refused a connection: wrong token");  // logged before the peer hears of it
            const proto::Header r = proto::make_header(proto::kHello, 0, 0, 0.0, static_cast<uint32_t>(msg.size()), proto::kError);
            write_full(fd, &r, sizeof r);
            write_full(fd, msg.data(), msg.size());
            return false;
        }
        peer_uid_ = cred.uid;
        open_peer_proc(cred.pid);  // held from here on: a later pid reuse cannot redirect it
        const proto::Header ok = proto::make_header(proto::kHello, 0, 0, 0.0, 0, proto::kOk);
        if (write_full(fd, &ok, sizeof ok)) return true;
        if (peer_proc_ >= 0) close(peer_proc_);
        peer_proc_ = -1;
        return false;
    }

    // Read exactly n bytes. first_wait: wait without limit for the first byte (then the rest
    // must follow within kMessageTimeout). Returns 1 done, 0 clean end before any byte, -1 error.
    static int read_full(int fd, void* dst, size_t n, double timeout, bool first_wait) {
        uint8_t* p = static_cast<uint8_t*>(dst);
        size_t got = 0;
        double deadline = first_wait ? -1.0 : now_s() + timeout;
        while (got < n) {
            if (g_stop) return -1;
            int wait_ms = 200;
            if (deadline > 0) {
                const double left = deadline - now_s();
                if (left <= 0) return -1;
                wait_ms = std::min(200, static_cast<int>(left * 1000) + 1);
            }
            pollfd pf{fd, POLLIN, 0};
            const int r = poll(&pf, 1, wait_ms);
            if (r < 0 && errno != EINTR) return -1;
            if (r <= 0) continue;
            const ssize_t k = ::recv(fd, p + got, n - got, 0);
            if (k == 0) return got == 0 ? 0 : -1;
            if (k < 0) { if (errno == EINTR || errno == EAGAIN) continue; return got == 0 ? 0 : -1; }
            got += static_cast<size_t>(k);
            if (deadline < 0) deadline = now_s() + kMessageTimeout;
        }
        return 1;
    }

    static bool write_full(int fd, const void* src, size_t n) {
        const uint8_t* p = static_cast<const uint8_t*>(src);
        while (n) {
            const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
            if (k < 0) { if (errno == EINTR) continue; return false; }
            p += k;
            n -= static_cast<size_t>(k);
        }
        return true;
    }

    std::string path_, token_;
    bool once_, bound_ = false, served_ = false;
    int listen_fd_ = -1, fd_ = -1;
    int peer_proc_ = -1, peer_proc_errno_ = 0;  // the current trainer's /proc/PID folder, or why not
    pid_t peer_pid_ = 0;
    uid_t peer_uid_ = 0;
    std::map<uint32_t, Table> maps_;
};

}  // namespace

std::unique_ptr<Transport> make_shm_transport(const std::string& path, const std::string& token, bool once) {
    return std::unique_ptr<Transport>(new ShmTransport(path, token, once));
}

}  // namespace agent
}  // namespace sni
