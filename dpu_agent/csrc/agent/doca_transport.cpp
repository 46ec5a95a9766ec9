// BlueField transport: control over a DOCA Comch server, rows by DOCA DMA between agent-local
// staging buffers and the trainer's exported mmaps. DOCA is loaded at run time (doca_api.hpp),
// so this one binary runs with the real SDK or with the simulated one of the tests.
//
// The trainer side is dpu_agent/doca/host.py (DocaHostEndpoint): it exports every region of a
// table for PCI read-write access and sends, per region, u64 host address | u64 bytes | export
// descriptor inside add_table. Messages travel as Comch frames (1-byte marker: 1 more follow,
// 0 last), reassembled by proto::Reassembler, which checks the header before buffering. One
// trainer per agent: after it has gone, next_peer() says stop.
// Comch only connects the host function the representor stands for, so there is no token.
#include "doca_transport.hpp"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "doca_api.hpp"

namespace sni {
namespace agent {
namespace {

class DocaTransport : public Transport {
public:
    static constexpr uint32_t kSendTasks = 64, kRecvQueue = 64, kDmaTasks = 16;
    static constexpr double kSendTimeout = 60.0, kDmaTimeout = 60.0, kStopTimeout = 10.0;

    DocaTransport(const std::string& pci, const std::string& name, const std::string& rep_pci,
                  const std::string& lib_dir)
        : pci_(pci), name_(name), rep_pci_(rep_pci) {
        if (self_) throw std::runtime_error("one DOCA transport per process");
        doca::load(lib_dir, &d_);
        self_ = this;
        try {
            open_device();
            open_representor();
            start_server();
            start_dma();
        } catch (...) {
            teardown();
            self_ = nullptr;
            throw;
        }
    }

    ~DocaTransport() override {
        try { teardown(); } catch (const std::exception& e) { log(std::string("DOCA teardown: ") + e.what()); }
        self_ = nullptr;
    }

    bool next_peer() override {
        if (served_) return false;
        while (!g_stop && conn_ == nullptr) progress_wait();
        if (conn_ == nullptr) return false;
        served_ = true;
        return true;
    }

    Recv recv(proto::Header* h, std::vector<uint8_t>* payload) override {
        while (inbox_.empty() && bad_.empty() && !gone_ && !g_stop) progress_wait();
        if (!inbox_.empty()) {
            std::vector<uint8_t>& m = inbox_.front();
            std::memcpy(h, m.data(), sizeof *h);
            payload->assign(m.begin() + sizeof *h, m.end());
            inbox_.pop_front();
            return kMessage;
        }
        if (!bad_.empty()) { log("malformed message, closing the connection: " + bad_); return kMalformed; }
        return kClosed;
    }

    bool send(const proto::Header& h, const uint8_t* payload) override {
        d_.pe_progress(pe_);  // notice a vanished peer before sending
        if (gone_ || conn_ == nullptr) return false;
        std::vector<uint8_t> msg(sizeof h + h.length);
        std::memcpy(msg.data(), &h, sizeof h);
        if (h.length) std::memcpy(msg.data() + sizeof h, payload, h.length);
        const size_t step = max_msg_ - 1;
        const size_t count = std::max<size_t>(1, (msg.size() + step - 1) / step);
        for (size_t i = 0; i < count; ++i) {
            const size_t off = i * step, n = std::min(step, msg.size() - off);
            std::vector<uint8_t> frame(1 + n);
            frame[0] = i + 1 == count ? 0 : 1;
            std::memcpy(frame.data() + 1, msg.data() + off, n);
            if (!send_frame(std::move(frame))) return false;
        }
        if (!progress_until([&] { return sending_.empty(); }, kSendTimeout)) {
            log("Comch send did not complete within " + std::to_string(kSendTimeout) + " s");
            return false;
        }
        if (send_failed_) { log("Comch send failed: the trainer went away"); return false; }
        return true;
    }

    void attach(uint32_t table, uint64_t rows, uint32_t dim, const proto::Blob* regions) override {
        if (tables_.count(table)) throw TransportError("table " + std::to_string(table) + " is already attached");
        Table& t = tables_[table];
        try {
            attach_regions(t, table, rows, dim, regions);
        } catch (...) {  // a refused table leaves nothing behind: its id can be added again
            for (Mapped& m : t.r) release(m);
            tables_.erase(table);
            throw;
        }
    }

    void read(uint32_t table, Region r, void* dst, uint64_t bytes) override {
        Mapped& m = get(table, r, bytes);
        dma(m.remote, m.remote_addr, m.local, reinterpret_cast<uint64_t>(m.local_addr), bytes);
        std::memcpy(dst, m.local_addr, bytes);
    }

    void write(uint32_t table, Region r, const void* src, uint64_t bytes) override {
        Mapped& m = get(table, r, bytes);
        std::memcpy(m.local_addr, src, bytes);
        dma(m.local, reinterpret_cast<uint64_t>(m.local_addr), m.remote, m.remote_addr, bytes);
    }

    void end_peer() override {
        for (auto& kv : tables_)
            for (Mapped& m : kv.second.r) release(m);
        tables_.clear();
    }

private:
    struct Mapped {
        doca::P remote = nullptr, local = nullptr;
        uint64_t remote_addr = 0, bytes = 0, length = 0;
        uint8_t* local_addr = nullptr;
    };
    struct Table { Mapped r[proto::kNumRegions]; };

    // Maps the trainer's regions of one table (attach; on an exception the caller releases them).
    void attach_regions(Table& t, uint32_t table, uint64_t rows, uint32_t dim, const proto::Blob* regions) {
        try {
            for (uint32_t k = 0; k < proto::kNumRegions; ++k) {
                const proto::Blob& b = regions[k];
                if (b.size <= 16)
                    throw TransportError("region " + std::to_string(k) + " of table " + std::to_string(table) +
                                         ": descriptor of " + std::to_string(b.size) + " bytes");
                uint64_t addr = 0, nbytes = 0;
                std::memcpy(&addr, b.data, 8);
                std::memcpy(&nbytes, b.data + 8, 8);
                const uint64_t want = exact_bytes(static_cast<Region>(k), rows, dim);
                if (nbytes != want)
                    throw TransportError("region " + std::to_string(k) + " of table " + std::to_string(table) +
                                         ": trainer announced " + std::to_string(nbytes) + " bytes, expected " +
                                         std::to_string(want));
                Mapped& m = t.r[k];
                call("doca_mmap_create_from_export",
                     d_.mmap_create_from_export(nullptr, b.data + 16, b.size - 16, dev_, &m.remote));
                m.remote_addr = addr;
                m.bytes = nbytes;
                m.length = std::max<uint64_t>(page(), (nbytes + page() - 1) / page() * page());
                void* p = mmap(nullptr, m.length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED) throw TransportError(std::string("mmap staging buffer: ") + std::strerror(errno));
                m.local_addr = static_cast<uint8_t*>(p);
                m.local = register_local(m.local_addr, m.length);
            }
        } catch (const doca::Error& e) {
            throw TransportError(e.what());
        }
    }

    // ---------------------------------------------------------------- helpers
    static uint64_t page() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

    // Bytes the trainer allocates for a region (dpu_agent.transport.region_layout: may be 0).
    static uint64_t exact_bytes(Region r, uint64_t rows, uint64_t dim) {
        return (r == kFresh || r == kServed) ? rows * dim * 4 : (r == kIds ? rows * 8 : rows * 4);
    }

    void call(const char* fn, doca::Err code, doca::Err also_ok = doca::kSuccess) {
        if (code == doca::kSuccess || code == also_ok) return;
        const char* nm = d_.error_get_name ? d_.error_get_name(code) : nullptr;
        throw doca::Error(std::string(fn) + " failed: " + (nm ? nm : "?") + " (" + std::to_string(code) + ")", code);
    }

    static double clock_s() {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
    }

    // One round of the progress engine; a short sleep when nothing happened.
    void progress_wait() {
        if (d_.pe_progress(pe_)) { idle_ = 0; return; }
        if (++idle_ > 64) usleep(static_cast<useconds_t>(std::min<uint32_t>(1000, idle_)));
    }

    template <class Cond>
    bool progress_until(Cond cond, double timeout) {
        const double deadline = clock_s() + timeout;
        while (!cond()) {
            if (clock_s() > deadline) return cond();
            progress_wait();
        }
        idle_ = 0;
        return true;
    }

    int state(doca::P ctx) {
        int s = 0;
        call("doca_ctx_get_state", d_.ctx_get_state(ctx, &s));
        return s;
    }

    void stop_ctx(doca::P ctx) {
        if (ctx == nullptr || state(ctx) == doca::kCtxIdle) return;
        call("doca_ctx_stop", d_.ctx_stop(ctx), doca::kInProgress);
        if (!progress_until([&] { return state(ctx) == doca::kCtxIdle; }, kStopTimeout))
            throw doca::Error("doca_ctx_stop: context still stopping after 10 s", doca::kTimeOut);
    }

    doca::P register_local(void* addr, uint64_t length) {
        doca::P mm = nullptr;
        call("doca_mmap_create", d_.mmap_create(&mm));
        try {
            call("doca_mmap_add_dev", d_.mmap_add_dev(mm, dev_));
            call("doca_mmap_set_permissions", d_.mmap_set_permissions(mm, doca::kAccessLocalReadWrite));
            call("doca_mmap_set_memrange", d_.mmap_set_memrange(mm, addr, length));
            call("doca_mmap_start", d_.mmap_start(mm));
        } catch (...) {
            d_.mmap_destroy(mm);
            throw;
        }
        return mm;
    }

    void release(Mapped& m) {
        if (m.remote) { d_.mmap_destroy(m.remote); m.remote = nullptr; }
        if (m.local) { d_.mmap_destroy(m.local); m.local = nullptr; }
        if (m.local_addr) { munmap(m.local_addr, m.length); m.local_addr = nullptr; }
    }

    Mapped& get(uint32_t table, Region r, uint64_t bytes) {
        auto it = tables_.find(table);
        if (it == tables_.end()) throw TransportError("no regions attached for table " + std::to_string(table));
        Mapped& m = it->second.r[r];
        if (bytes > m.bytes)
            throw TransportError("access of " + std::to_string(bytes) + " bytes beyond region " + std::to_string(r));
        return m;
    }

    // ---------------------------------------------------------------- setup
    // The first entry of a DOCA list (devices or representors) that `match` accepts, opened with
    // `open`; the list is destroyed on every path. One walk for both lists.
    template <class Match, class Open>
    static void open_first(doca::P* list, uint32_t n, doca::Err (*destroy)(doca::P*), Match match, Open open) {
        try {
            for (uint32_t i = 0; i < n; ++i) {
                if (match(list[i])) {
                    open(list[i]);
                    break;
                }
            }
        } catch (...) {
            destroy(list);
            throw;
        }
        destroy(list);
    }

    void open_device() {
        doca::P* list = nullptr;
        uint32_t n = 0;
        call("doca_devinfo_create_list", d_.devinfo_create_list(&list, &n));
        open_first(list, n, d_.devinfo_destroy_list, [&](doca::P info) {
            uint8_t eq = 0;
            call("doca_devinfo_is_equal_pci_addr", d_.devinfo_is_equal_pci_addr(info, pci_.c_str(), &eq));
            return eq != 0;
        }, [&](doca::P info) {
            call("doca_dma_cap_task_memcpy_is_supported", d_.dma_cap_task_memcpy_is_supported(info));
            call("doca_dev_open", d_.dev_open(info, &dev_));
        });
        if (dev_ == nullptr)
            throw doca::Error("no DOCA device has PCI address " + pci_ + " (" + std::to_string(n) + " devices found)",
                              doca::kNotFound);
        call("doca_pe_create", d_.pe_create(&pe_));
        call("doca_comch_cap_get_max_msg_size", d_.comch_cap_get_max_msg_size(devinfo(), &max_msg_));
        if (max_msg_ < 2) throw doca::Error("the device allows " + std::to_string(max_msg_) + "-byte messages only",
                                            doca::kInvalidValue);
    }

    doca::P devinfo() { return d_.dev_as_devinfo(dev_); }

    void open_representor() {
        doca::P* list = nullptr;
        uint32_t n = 0;
        call("doca_devinfo_rep_create_list", d_.devinfo_rep_create_list(dev_, doca::kRepFilterNet, &list, &n));
        open_first(list, n, d_.devinfo_rep_destroy_list, [&](doca::P info) {
            if (rep_pci_.empty()) return true;
            uint8_t eq = 0;
            call("doca_devinfo_rep_is_equal_pci_addr", d_.devinfo_rep_is_equal_pci_addr(info, rep_pci_.c_str(), &eq));
            return eq != 0;
        }, [&](doca::P info) { call("doca_dev_rep_open", d_.dev_rep_open(info, &rep_)); });
        if (rep_ == nullptr)
            throw doca::Error("device " + pci_ + " has no network representor " +
                              (rep_pci_.empty() ? std::string("at all") : "with PCI address " + rep_pci_) + " (" +
                              std::to_string(n) + " found); the Comch server needs the host function's representor",
                              doca::kNotFound);
    }

    void start_server() {
        call("doca_comch_cap_server_is_supported", d_.comch_cap_server_is_supported(devinfo()));
        call("doca_comch_server_create", d_.comch_server_create(dev_, rep_, name_.c_str(), &server_));
        call("doca_comch_server_set_max_msg_size", d_.comch_server_set_max_msg_size(server_, max_msg_));
        call("doca_comch_server_set_recv_queue_size", d_.comch_server_set_recv_queue_size(server_, kRecvQueue));
        server_ctx_ = d_.comch_server_as_ctx(server_);
        call("doca_pe_connect_ctx", d_.pe_connect_ctx(pe_, server_ctx_));
        call("doca_comch_server_task_send_set_conf",
             d_.comch_server_task_send_set_conf(server_, &on_send_done, &on_send_done, kSendTasks));
        call("doca_comch_server_event_msg_recv_register", d_.comch_server_event_msg_recv_register(server_, &on_recv));
        call("doca_comch_server_event_connection_status_changed_register",
             d_.comch_server_event_connection_status_changed_register(server_, &on_connect, &on_disconnect));
        call("doca_ctx_start", d_.ctx_start(server_ctx_));
    }

    void start_dma() {
        call("doca_dma_cap_task_memcpy_get_max_buf_size", d_.dma_cap_task_memcpy_get_max_buf_size(devinfo(), &max_dma_));
        if (max_dma_ == 0) throw doca::Error("the device's DMA memcpy max buffer size is 0", doca::kInvalidValue);
        call("doca_dma_create", d_.dma_create(dev_, &dma_));
        dma_ctx_ = d_.dma_as_ctx(dma_);
        call("doca_pe_connect_ctx", d_.pe_connect_ctx(pe_, dma_ctx_));
        call("doca_dma_task_memcpy_set_conf", d_.dma_task_memcpy_set_conf(dma_, &on_dma_done, &on_dma_done, kDmaTasks));
        call("doca_ctx_start", d_.ctx_start(dma_ctx_));
        call("doca_buf_inventory_create", d_.buf_inventory_create(2 * kDmaTasks, &inventory_));
        call("doca_buf_inventory_start", d_.buf_inventory_start(inventory_));
    }

    // Release in order: regions, inventory, DMA, Comch server, engine, representor, device.
    void teardown() {
        std::string first;
        auto step = [&](auto fn) {
            try { fn(); } catch (const std::exception& e) { if (first.empty()) first = e.what(); }
        };
        step([&] { end_peer(); });
        step([&] { if (inventory_) { doca::P i = inventory_; inventory_ = nullptr; call("doca_buf_inventory_destroy", d_.buf_inventory_destroy(i)); } });
        step([&] {
            if (!dma_) return;
            try { stop_ctx(dma_ctx_); } catch (...) { doca::P x = dma_; dma_ = nullptr; d_.dma_destroy(x); throw; }
            doca::P x = dma_; dma_ = nullptr;
            call("doca_dma_destroy", d_.dma_destroy(x));
        });
        step([&] {
            if (!server_) return;
            try { stop_ctx(server_ctx_); } catch (...) { doca::P x = server_; server_ = nullptr; d_.comch_server_destroy(x); throw; }
            doca::P x = server_; server_ = nullptr;
            call("doca_comch_server_destroy", d_.comch_server_destroy(x));
        });
        step([&] { if (pe_) { doca::P x = pe_; pe_ = nullptr; call("doca_pe_destroy", d_.pe_destroy(x)); } });
        step([&] { if (rep_) { doca::P x = rep_; rep_ = nullptr; call("doca_dev_rep_close", d_.dev_rep_close(x)); } });
        step([&] { if (dev_) { doca::P x = dev_; dev_ = nullptr; call("doca_dev_close", d_.dev_close(x)); } });
        if (!first.empty()) throw std::runtime_error(first);
    }

    // ---------------------------------------------------------------- Comch
    bool send_frame(std::vector<uint8_t> frame) {
        doca::P task = nullptr;
        while (true) {  // every send task in flight: progress until one completes
            const doca::Err e = d_.comch_server_task_send_alloc_init(server_, conn_, frame.data(),
                                                                     static_cast<uint32_t>(frame.size()), &task);
            if (e == doca::kSuccess) break;
            if (e != doca::kNoMemory) { log(std::string("Comch send refused: ") + d_.error_get_name(e)); return false; }
            if (!progress_until([&] { return sending_.size() < kSendTasks; }, kSendTimeout)) return false;
        }
        doca::P base = d_.comch_task_send_as_task(task);
        while (true) {  // DOCA_ERROR_AGAIN: the peer's queue is full
            const doca::Err e = d_.task_submit(base);
            if (e == doca::kSuccess) break;
            if (e != doca::kAgain) {
                d_.task_free(base);
                log(std::string("Comch send refused: ") + d_.error_get_name(e));
                return false;
            }
            progress_wait();
        }
        sending_[base] = std::move(frame);  // DOCA may read the frame until completion
        return true;
    }

    static void on_send_done(doca::P task, doca::Data, doca::Data) {
        DocaTransport* t = self_;
        doca::P base = t->d_.comch_task_send_as_task(task);
        if (t->d_.task_get_status(base) != doca::kSuccess) t->send_failed_ = true;
        t->d_.task_free(base);
        t->sending_.erase(base);
    }

    static void on_recv(doca::P, uint8_t* buf, uint32_t len, doca::P conn) {
        DocaTransport* t = self_;
        if (conn != t->conn_ || !t->bad_.empty()) return;  // not our trainer, or closing
        std::string err;
        switch (t->frames_.feed(buf, len, &err)) {
        case proto::Reassembler::kNeedMore: return;
        case proto::Reassembler::kBad: t->bad_ = err; t->frames_.reset(); return;
        case proto::Reassembler::kDone: {
            const proto::Header& h = t->frames_.header();
            std::vector<uint8_t> m(sizeof h + h.length);
            std::memcpy(m.data(), &h, sizeof h);
            if (h.length) std::memcpy(m.data() + sizeof h, t->frames_.payload(), h.length);
            t->inbox_.push_back(std::move(m));
            t->frames_.reset();
            return;
        }
        }
    }

    static void on_connect(doca::P, doca::P conn, uint8_t ok) {
        DocaTransport* t = self_;
        if (!ok) return;
        if (t->conn_ == nullptr && !t->gone_) t->conn_ = conn;
        else t->d_.comch_server_disconnect(t->server_, conn);  // one trainer per agent
    }

    static void on_disconnect(doca::P, doca::P conn, uint8_t) {
        DocaTransport* t = self_;
        if (conn == t->conn_) t->gone_ = true;
    }

    // ---------------------------------------------------------------- DMA
    // Copy `bytes` from (src mmap, address) to (dst mmap, address) in memcpy tasks of at most
    // the device's max buffer size, up to kDmaTasks in flight; throws TransportError on failure.
    void dma(doca::P src_mm, uint64_t src, doca::P dst_mm, uint64_t dst, uint64_t bytes) {
        if (bytes == 0) return;
        const uint64_t chunks = (bytes + max_dma_ - 1) / max_dma_;
        std::map<uint64_t, std::pair<doca::P, doca::P>> inflight;
        dma_done_.clear();
        doca::Err failure = doca::kSuccess;
        std::string error;
        uint64_t next = 0;
        while ((next < chunks && error.empty()) || !inflight.empty()) {
            while (next < chunks && error.empty() && inflight.size() < kDmaTasks) {
                const uint64_t off = next * max_dma_, n = std::min(max_dma_, bytes - off);
                void* s = reinterpret_cast<void*>(src + off);
                void* t = reinterpret_cast<void*>(dst + off);
                doca::P sb = nullptr, db = nullptr, task = nullptr;
                doca::Err e = d_.buf_inventory_buf_get_by_args(inventory_, src_mm, s, n, s, 0, &sb);
                if (e == doca::kSuccess) e = d_.buf_set_data(sb, s, n);
                if (e == doca::kSuccess) e = d_.buf_inventory_buf_get_by_args(inventory_, dst_mm, t, n, t, 0, &db);
                doca::Data ud;
                ud.u64 = next;
                if (e == doca::kSuccess) e = d_.dma_task_memcpy_alloc_init(dma_, sb, db, ud, &task);
                if (e == doca::kSuccess) {
                    doca::P base = d_.dma_task_memcpy_as_task(task);
                    e = d_.task_submit(base);
                    if (e != doca::kSuccess) d_.task_free(base);
                }
                if (e != doca::kSuccess) {
                    if (sb) d_.buf_dec_refcount(sb, nullptr);
                    if (db) d_.buf_dec_refcount(db, nullptr);
                    error = std::string("DMA memcpy task setup failed: ") + d_.error_get_name(e);
                    break;
                }
                inflight[next++] = {sb, db};
            }
            if (inflight.empty()) break;
            if (!progress_until([&] { return !dma_done_.empty(); }, kDmaTimeout))
                throw TransportError(std::to_string(inflight.size()) + " DMA task(s) did not complete in 60 s");
            for (const auto& kv : dma_done_) {
                auto it = inflight.find(kv.first);
                if (it == inflight.end()) continue;
                d_.buf_dec_refcount(it->second.first, nullptr);
                d_.buf_dec_refcount(it->second.second, nullptr);
                inflight.erase(it);
                if (kv.second != doca::kSuccess && failure == doca::kSuccess) failure = kv.second;
            }
            dma_done_.clear();
        }
        if (!error.empty()) throw TransportError(error);
        if (failure != doca::kSuccess)
            throw TransportError(std::string("DMA memcpy task failed: ") + d_.error_get_name(failure) + " copying " +
                                 std::to_string(bytes) + " bytes in " + std::to_string(chunks) + " chunk(s)");
    }

    static void on_dma_done(doca::P task, doca::Data ud, doca::Data) {
        DocaTransport* t = self_;
        doca::P base = t->d_.dma_task_memcpy_as_task(task);
        const doca::Err status = t->d_.task_get_status(base);
        t->d_.task_free(base);
        t->dma_done_.emplace_back(ud.u64, status);
    }

    static inline DocaTransport* self_ = nullptr;  // callbacks find the transport here
    doca::Api d_{};
    std::string pci_, name_, rep_pci_;
    doca::P dev_ = nullptr, rep_ = nullptr, pe_ = nullptr, server_ = nullptr, server_ctx_ = nullptr;
    doca::P dma_ = nullptr, dma_ctx_ = nullptr, inventory_ = nullptr, conn_ = nullptr;
    uint32_t max_msg_ = 0, idle_ = 0;
    uint64_t max_dma_ = 0;
    bool served_ = false, gone_ = false, send_failed_ = false;
    std::string bad_;
    proto::Reassembler frames_;
    std::deque<std::vector<uint8_t>> inbox_;
    std::map<doca::P, std::vector<uint8_t>> sending_;
    std::vector<std::pair<uint64_t, doca::Err>> dma_done_;
    std::map<uint32_t, Table> tables_;
};

}  // namespace

std::unique_ptr<Transport> make_doca_transport(const std::string& pci, const std::string& name,
                                               const std::string& rep_pci, const std::string& lib_dir) {
    return std::unique_ptr<Transport>(new DocaTransport(pci, name, rep_pci, lib_dir));
}

}  // namespace agent
}  // namespace sni
