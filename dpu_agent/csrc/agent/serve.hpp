// The agent's serving loop: requests from a Transport executed on the C++ tables.
//
// Each request gets exactly one reply. A request that fails (bad table, never-synchronised
// rows, a region that cannot be mapped, memory) gets an error reply and serving goes on (the
// trainer decides); a malformed message closes the connection (logged). Called by main.cpp.
#pragma once
#include <new>
#include <string>
#include <vector>

#include "../tables.hpp"
#include "transport.hpp"

namespace sni {
namespace agent {

class Server {
public:
    explicit Server(Transport& t) : t_(t) {}

    // Serve trainers one after another until the transport says stop.
    void run() {
        while (t_.next_peer()) {
            serve_peer();
            t_.end_peer();
            agent_.clear();
        }
    }

private:
    void serve_peer() {
        proto::Header h;
        std::vector<uint8_t> payload;
        while (true) {
            const Transport::Recv r = t_.recv(&h, &payload);
            if (r != Transport::kMessage) return;
            if (h.op == proto::kClose) return;
            std::vector<uint8_t> out;
            std::string error;
            try {
                handle(h, payload, &out);
            } catch (const proto_error& e) {  // malformed payload: close
                log(std::string("malformed ") + proto::op_name(h.op) + " message, closing the connection: " + e.what());
                return;
            } catch (const std::bad_alloc&) {
                error = std::string("MemoryError: out of memory executing ") + proto::op_name(h.op);
            } catch (const std::exception& e) {
                error = std::string("ValueError: ") + e.what();
            }
            if (!error.empty()) {
                if (error.size() > proto::kMaxErrorText) error.resize(proto::kMaxErrorText);
                out.assign(error.begin(), error.end());
            }
            const proto::Header reply = proto::make_header(h.op, h.table, h.flags, h.step,
                                                           static_cast<uint32_t>(out.size()),
                                                           error.empty() ? proto::kOk : proto::kError);
            if (!t_.send(reply, out.data())) return;
        }
    }

    struct proto_error : std::runtime_error { using std::runtime_error::runtime_error; };

    void handle(const proto::Header& h, const std::vector<uint8_t>& payload, std::vector<uint8_t>* out) {
        std::string err;
        switch (h.op) {
        case proto::kHello:
            throw proto_error("hello after the connection was authenticated");
        case proto::kAddTable: {
            proto::AddTable a;
            if (!proto::parse_add_table(payload.data(), payload.size(), &a, &err)) throw proto_error(err);
            if (agent_.has(h.table)) throw table::Error("table " + std::to_string(h.table) + " already exists");
            table::TableParams p;
            p.window = a.window; p.beta = a.beta; p.lam = a.lam;
            agent_.add_table(h.table, static_cast<int64_t>(a.num_rows), a.dim, a.sampled, a.kind, p);
            try {
                t_.attach(h.table, a.num_rows, a.dim, a.regions);
            } catch (...) {
                agent_.remove(h.table);
                throw;
            }
            return;
        }
        case proto::kObserve: {
            uint64_t count = 0;
            if (!proto::parse_observe(payload.data(), payload.size(), &count, &err)) throw proto_error(err);
            table::HistoryTable& tab = agent_.table(h.table);
            if (count > static_cast<uint64_t>(tab.num_rows()))
                throw table::Error("observe: " + std::to_string(count) + " rows for a table of " + std::to_string(tab.num_rows()));
            const bool partial = h.flags & proto::kPartial;
            rows_.resize(count * tab.dim());
            t_.read(h.table, kFresh, rows_.data(), rows_.size() * 4);
            if (partial) {
                ids_.resize(count);
                t_.read(h.table, kIds, ids_.data(), count * 8);
            }
            tab.observe(h.step, rows_.data(), static_cast<int64_t>(count), partial ? ids_.data() : nullptr);
            return;
        }
        case proto::kServe: {
            table::HistoryTable& tab = agent_.table(h.table);
            rows_.resize(static_cast<size_t>(tab.num_rows() * tab.dim()));
            weight_.resize(static_cast<size_t>(tab.num_rows()));
            tab.serve(h.step, h.flags & proto::kPreview, rows_.data(), weight_.data());
            t_.write(h.table, kServed, rows_.data(), rows_.size() * 4);
            t_.write(h.table, kWeight, weight_.data(), weight_.size() * 4);
            return;
        }
        case proto::kDrift: {
            table::HistoryTable& tab = agent_.table(h.table);
            weight_.resize(static_cast<size_t>(tab.num_rows()));
            tab.drift(h.step, weight_.data());
            t_.write(h.table, kDrift, weight_.data(), weight_.size() * 4);
            return;
        }
        case proto::kStats: {
            const table::AgentStats s = agent_.stats();
            proto::Stats p{s.predictor_s, s.tables, s.tracked_rows, s.predicted_slots};
            out->resize(sizeof p);
            std::memcpy(out->data(), &p, sizeof p);
            return;
        }
        default:
            throw proto_error("unexpected operation");
        }
    }

    Transport& t_;
    table::Agent agent_;
    std::vector<float> rows_, weight_;
    std::vector<int64_t> ids_;
};

}  // namespace agent
}  // namespace sni
