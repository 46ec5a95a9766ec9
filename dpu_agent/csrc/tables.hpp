// The agent's history tables: one per exchanged tensor of one trainer (see dpu_agent/tables.py).
//
// A HistoryTable owns, for the n halo rows a trainer reads from one tensor, the last
// synchronised value of every row (the history cache), the time each row was last observed,
// a per-row speed estimate (adaptive sync policy) and a predictor core (predictor.hpp) over
// the sampled rows only. Agent holds the tables by id. One implementation for both front
// ends: the Cython module (dpu_agent/_core.pyx, the inline agent) and the sni-agent binary.
// make_core builds a table's predictor core; _core.PredictorCore binds it alone (tests and
// benchmarks), so Python drives the predictors exactly as the tables do.
//
// Arithmetic is numpy's, to the bit, so that the results equal those of the former numpy
// tables: row norms are float32 squares summed with numpy's pairwise summation, speeds and
// drifts are computed in double and rounded once to float32. Compile without FP contraction
// (-ffp-contract=off) so that no target fuses a multiply-add numpy does not fuse.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "predictor.hpp"

namespace sni {
namespace table {

// Predictor kinds a table accepts (dpu_agent.predictors.PREDICTOR_NAMES, same order).
enum Kind : uint32_t { kCache = 0, kTrend = 1, kGated = 2, kHolt = 3, kWindow = 4, kNumKinds = 5 };
inline const char* kind_name(uint32_t k) {
    static const char* names[] = {"cache", "linear-trend", "gated", "holt", "window-trend"};
    return k < kNumKinds ? names[k] : "?";
}

// numpy's float32 pairwise summation (add.reduce over a contiguous axis), same order.
inline float pairwise_sum(const float* a, int64_t n) {
    if (n < 8) {
        float res = 0.0f;
        for (int64_t i = 0; i < n; ++i) res += a[i];
        return res;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; ++j) r[j] = a[j];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; ++j) r[j] += a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

// np.linalg.norm of one float32 row (sqrt of the pairwise sum of squares), using tmp[dim].
inline float row_norm(const float* x, int64_t dim, float* tmp) {
    for (int64_t d = 0; d < dim; ++d) tmp[d] = x[d] * x[d];
    return std::sqrt(0.0f + pairwise_sum(tmp, dim));
}

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

inline std::string fmt_num(double v) {
    char b[64];
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(b, sizeof b, "%.1f", v);
    else std::snprintf(b, sizeof b, "%.17g", v);
    return b;
}

inline std::string status_text(int st, const char* what, int64_t id, int64_t num, double t) {
    using namespace sni::pred;
    const std::string w(what), i = std::to_string(id);
    switch (st) {
    case kOutOfRange: return w + ": node id " + i + " out of range [0, " + std::to_string(num) + ")";
    case kDuplicate: return w + ": duplicate node id " + i + " (ids in one call must be distinct)";
    case kNotObserved: return w + ": node " + i + " has never been observed (its first call needs an observation)";
    case kTimeBackwards: return w + ": t=" + fmt_num(t) + " is earlier than node " + i + "'s last time";
    default: return w + ": unexpected status " + std::to_string(st);
    }
}

// 64-byte aligned buffers of one predictor core (records of stride floats + zeroed NodeMeta).
struct CoreBuffers {
    float* data = nullptr;
    pred::NodeMeta* meta = nullptr;
    int64_t stride;
    CoreBuffers(int64_t num_nodes, int64_t stride_floats) : stride(stride_floats) {
        const size_t db = static_cast<size_t>(pred::round_up((num_nodes * stride + 16) * 4, 64));
        const size_t mb = static_cast<size_t>(pred::round_up(num_nodes * 16 + 64, 64));
        data = static_cast<float*>(std::aligned_alloc(64, db));
        meta = static_cast<pred::NodeMeta*>(std::aligned_alloc(64, mb));
        if (!data || !meta) { std::free(data); std::free(meta); throw std::bad_alloc(); }
        std::memset(static_cast<void*>(meta), 0, mb);
    }
    ~CoreBuffers() { std::free(data); std::free(meta); }
    CoreBuffers(const CoreBuffers&) = delete;
    CoreBuffers& operator=(const CoreBuffers&) = delete;
};

struct TableParams {
    int64_t window = 4;
    double beta = 0.2, lam = 0.2;
};

// One predictor core over a table's sampled slots, as the table drives it: observe folds in
// synced rows; serve predicts rows and per-row weights (linear-trend feeds its prediction
// back when served, unless preview; the other kinds are read-only). Calls return a
// pred::Status and the offending row in *bad (status_text words it). Made by make_core.
class Core {
public:
    virtual ~Core() = default;
    virtual bool self_feeding() const { return false; }
    virtual int observe(const int64_t* s, int64_t n, double t, const float* rows, int64_t* bad) = 0;
    virtual int serve(const int64_t* s, int64_t n, double t, bool preview, float* out, float* w, int64_t* bad) = 0;
    virtual int64_t record_floats() const = 0;  // floats of one slot's record, padding included
};

class TrendCore : public Core {
public:
    TrendCore(int64_t n, int64_t dim, int64_t window, double beta, double lam)
        : buf_(n, pred::TrendPredictor::stride(dim, window)),
          c_(n, dim, window, beta, lam, 1e-8, buf_.data, buf_.meta), dim_(dim) {}
    bool self_feeding() const override { return true; }
    int observe(const int64_t* s, int64_t n, double t, const float* rows, int64_t* bad) override {
        std::vector<float> out(static_cast<size_t>(n) * static_cast<size_t>(dim_), 0.0f);
        return c_.step(s, n, t, rows, nullptr, out.data(), bad);
    }
    int serve(const int64_t* s, int64_t n, double t, bool preview, float* out, float* w, int64_t* bad) override {
        const int st = preview ? c_.peek(s, n, t, out, bad) : c_.step(s, n, t, nullptr, nullptr, out, bad);
        if (st == pred::kOk) for (int64_t r = 0; r < n; ++r) w[r] = 1.0f;
        return st;
    }
    int64_t record_floats() const override { return buf_.stride; }
protected:
    CoreBuffers buf_;
    pred::TrendPredictor c_;
    int64_t dim_;
};

class GatedCore : public Core {
public:
    static pred::GateParams params(double lam) {
        // no horizon damping (beta 0): the gate's learned gain decides how much to trust
        pred::GateParams p{};
        p.beta = 0.0; p.lam = lam; p.eps = 1e-8; p.decay = 0.5; p.margin = 0.1;
        p.max_horizon = 10.0; p.trend_cap = 2.0; p.min_compare = 2;
        return p;
    }
    GatedCore(int64_t n, int64_t dim, int64_t window, double lam)
        : buf_(n, pred::GatedPredictor::stride(dim, window)), c_(n, dim, window, params(lam), buf_.data, buf_.meta) {}
    int observe(const int64_t* s, int64_t n, double t, const float* rows, int64_t* bad) override {
        return c_.observe(s, n, t, rows, bad);
    }
    int serve(const int64_t* s, int64_t n, double t, bool, float* out, float* w, int64_t* bad) override {
        return c_.serve(s, n, t, out, w, bad);
    }
    int64_t record_floats() const override { return buf_.stride; }
private:
    CoreBuffers buf_;
    pred::GatedPredictor c_;
};

// The paper's Algorithm 1 over the synced rows: the trend core fed the syncs only, served by
// its read-only windowed trend (predict_window), never self-feeding.
class WindowCore : public TrendCore {
public:
    WindowCore(int64_t n, int64_t dim, int64_t window, double beta, double lam)
        : TrendCore(n, dim, window, beta, lam), lam_(lam) {}
    bool self_feeding() const override { return false; }
    int serve(const int64_t* s, int64_t n, double t, bool, float* out, float* w, int64_t* bad) override {
        const int st = c_.predict_window(s, n, t, 0.3, 5.0, lam_, out, bad);
        if (st == pred::kOk) for (int64_t r = 0; r < n; ++r) w[r] = 1.0f;
        return st;
    }
private:
    double lam_;
};

class HoltCore : public Core {
public:
    HoltCore(int64_t n, int64_t dim) : buf_(n, pred::HoltPredictor::stride(dim)), c_(n, dim, 0.5, 0.3, 1e-8, buf_.data, buf_.meta) {}
    int observe(const int64_t* s, int64_t n, double t, const float* rows, int64_t* bad) override {
        return c_.observe(s, n, t, rows, bad);
    }
    int serve(const int64_t* s, int64_t n, double t, bool, float* out, float* w, int64_t* bad) override {
        const int st = c_.forecast(s, n, t, out, bad);
        if (st == pred::kOk) for (int64_t r = 0; r < n; ++r) w[r] = 1.0f;
        return st;
    }
    int64_t record_floats() const override { return buf_.stride; }
private:
    CoreBuffers buf_;
    pred::HoltPredictor c_;
};

// The checks of a table's or a core's sizes (count: what n is called in the message).
inline void check_sizes(uint32_t kind, int64_t n, int64_t dim, const TableParams& p, const char* count) {
    if (kind >= kNumKinds) throw Error("unknown predictor kind " + std::to_string(kind));
    if (n < 0) throw Error(std::string(count) + " must be >= 0, got " + std::to_string(n));
    if (dim < 1) throw Error("dim must be >= 1, got " + std::to_string(dim));
    if (p.window < 1 || p.window > pred::kMaxWindow)
        throw Error("window must lie in [1, " + std::to_string(pred::kMaxWindow) + "], got " + std::to_string(p.window));
}

// The predictor core of kind over n slots of dim floats (null for kCache: the history cache
// alone). The one place where each kind's core and its fixed parameters are chosen.
inline std::unique_ptr<Core> make_core(uint32_t kind, int64_t n, int64_t dim, const TableParams& p) {
    check_sizes(kind, n, dim, p, "num_nodes");
    switch (kind) {
    case kTrend: return std::make_unique<TrendCore>(n, dim, p.window, p.beta, p.lam);
    case kGated: return std::make_unique<GatedCore>(n, dim, p.window, p.lam);
    case kWindow: return std::make_unique<WindowCore>(n, dim, p.window, p.beta, p.lam);
    case kHolt: return std::make_unique<HoltCore>(n, dim);
    default: return nullptr;
    }
}

// History cache + predictor for the halo rows of one tensor. Owned by Agent.
class HistoryTable {
public:
    HistoryTable(int64_t num_rows, int64_t dim, const uint8_t* sampled, uint32_t kind, const TableParams& p)
        : num_rows_(num_rows), dim_(dim), kind_(kind) {
        check_sizes(kind, num_rows, dim, p, "num_rows");
        const size_t cells = static_cast<size_t>(num_rows) * static_cast<size_t>(dim);
        cache_.assign(cells, 0.0f);
        served_.assign(cells, 0.0f);
        weight_.assign(static_cast<size_t>(num_rows), 0.0f);
        t_obs_.assign(static_cast<size_t>(num_rows), -std::numeric_limits<double>::infinity());
        speed_.assign(static_cast<size_t>(num_rows), 0.0f);
        slot_.assign(static_cast<size_t>(num_rows), -1);
        for (int64_t i = 0; i < num_rows; ++i)
            if (sampled[i]) { slot_[i] = static_cast<int64_t>(sampled_rows_.size()); sampled_rows_.push_back(i); }
        const int64_t ns = static_cast<int64_t>(sampled_rows_.size());
        if (ns > 0) core_ = make_core(kind, ns, dim, p);
        self_feeding_ = core_ && core_->self_feeding();
        all_slots_.resize(static_cast<size_t>(ns));
        for (int64_t k = 0; k < ns; ++k) all_slots_[k] = k;
        tmp_.resize(static_cast<size_t>(dim));
    }

    int64_t num_rows() const { return num_rows_; }
    int64_t dim() const { return dim_; }
    uint32_t kind() const { return kind_; }
    int64_t predicted_slots() const { return static_cast<int64_t>(sampled_rows_.size()); }
    double predictor_s() const { return predictor_s_; }
    const float* cache() const { return cache_.data(); }
    const double* t_obs() const { return t_obs_.data(); }
    const float* speed() const { return speed_.data(); }

    // Fresh rows [count, dim] synchronised at step: all rows (ids null, count == num_rows) or ids.
    void observe(double step, const float* rows, int64_t count, const int64_t* ids) {
        if (!std::isfinite(step)) throw Error("observe: step must be finite, got " + fmt_num(step));
        if (ids == nullptr && count != num_rows_)
            throw Error("observe needs rows of shape (" + std::to_string(num_rows_) + ", " + std::to_string(dim_) +
                        "), got (" + std::to_string(count) + ", " + std::to_string(dim_) + ")");
        if (count < 0 || count > num_rows_) throw Error("observe: " + std::to_string(count) + " rows for a table of " +
                                                        std::to_string(num_rows_));
        std::vector<int64_t> own;
        if (ids == nullptr) {
            own.resize(static_cast<size_t>(count));
            for (int64_t r = 0; r < count; ++r) own[r] = r;
            ids = own.data();
        } else {
            std::vector<uint8_t> seen(static_cast<size_t>(num_rows_), 0);
            for (int64_t r = 0; r < count; ++r) {
                const int64_t i = ids[r];
                if (i < 0 || i >= num_rows_)
                    throw Error("observe: row id " + std::to_string(i) + " out of range [0, " + std::to_string(num_rows_) + ")");
                if (seen[i]) throw Error("observe: duplicate row id " + std::to_string(i));
                seen[i] = 1;
            }
        }
        for (int64_t r = 0; r < count; ++r) {
            const int64_t i = ids[r];
            const float* row = rows + r * dim_;
            float* c = &cache_[static_cast<size_t>(i) * dim_];
            if (std::isfinite(t_obs_[i])) {
                const double dt = std::max(step - t_obs_[i], 1e-8);
                for (int64_t d = 0; d < dim_; ++d) { const float e = row[d] - c[d]; tmp_[d] = e * e; }
                const float nrm = std::sqrt(0.0f + pairwise_sum(tmp_.data(), dim_));
                speed_[i] = static_cast<float>(static_cast<double>(nrm) / dt);
            }
            std::memcpy(c, row, static_cast<size_t>(dim_) * sizeof(float));
            t_obs_[i] = step;
        }
        if (core_) {
            std::vector<int64_t> slots;
            std::vector<float> obs;
            const bool skip = self_feeding_ && has_fed_ && fed_step_ == step;
            if (!skip) {
                for (int64_t r = 0; r < count; ++r) {
                    const int64_t s = slot_[ids[r]];
                    if (s < 0) continue;
                    slots.push_back(s);
                    obs.insert(obs.end(), rows + r * dim_, rows + (r + 1) * dim_);
                }
            }
            if (!slots.empty()) {
                const auto start = clock::now();
                int64_t bad = -1;
                const int st = core_->observe(slots.data(), static_cast<int64_t>(slots.size()), step, obs.data(), &bad);
                predictor_s_ += seconds_since(start);
                if (st != pred::kOk)
                    throw Error(status_text(st, "observe", slots[bad], predicted_slots(), step));
            }
        }
        if (has_served_ && served_step_ >= step) has_served_ = false;  // history changed under a memo
    }

    // Rows to use at step for every halo row and per-row predictor weight (memoised per step;
    // preview computes without advancing state). Writes into rows/weight ([num_rows, dim], [num_rows]).
    void serve(double step, bool preview, float* rows, float* weight) {
        if (!std::isfinite(step)) throw Error("serve: step must be finite, got " + fmt_num(step));
        if (has_served_ && served_step_ == step && !preview) {
            copy_out(served_.data(), weight_.data(), rows, weight);
            return;
        }
        for (int64_t i = 0; i < num_rows_; ++i)
            if (!std::isfinite(t_obs_[i]))
                throw Error("row " + std::to_string(i) + " was never synchronised; a stale step cannot serve it");
        std::vector<float> pv, pw;
        float* out = served_.data();
        float* w = weight_.data();
        if (preview) {
            pv.resize(served_.size());
            pw.resize(weight_.size());
            out = pv.data();
            w = pw.data();
        }
        std::memcpy(out, cache_.data(), cache_.size() * sizeof(float));
        std::fill(w, w + num_rows_, 0.0f);
        if (core_ && !sampled_rows_.empty()) {
            const int64_t ns = predicted_slots();
            std::vector<float> pred(static_cast<size_t>(ns) * dim_), pwt(static_cast<size_t>(ns));
            const auto start = clock::now();
            int64_t bad = -1;
            const int st = core_->serve(all_slots_.data(), ns, step, preview, pred.data(), pwt.data(), &bad);
            if (st != pred::kOk) {
                predictor_s_ += seconds_since(start);
                if (!preview) has_served_ = false;
                throw Error(status_text(st, "serve", all_slots_[bad], ns, step));
            }
            for (int64_t k = 0; k < ns; ++k) {
                const int64_t i = sampled_rows_[k];
                std::memcpy(out + i * dim_, &pred[static_cast<size_t>(k) * dim_], static_cast<size_t>(dim_) * sizeof(float));
                w[i] = pwt[k];
            }
            predictor_s_ += seconds_since(start);
        }
        if (!preview) {
            has_served_ = true;
            served_step_ = step;
            has_fed_ = self_feeding_;
            fed_step_ = step;
        }
        copy_out(out, w, rows, weight);
    }

    // Predicted drift of every row since its last observation (adaptive policy): speed x
    // steps since observed, relative to the table's mean row norm.
    void drift(double step, float* out) {
        float mean = std::numeric_limits<float>::quiet_NaN();
        if (num_rows_ > 0) {
            std::vector<float> norms(static_cast<size_t>(num_rows_));
            for (int64_t i = 0; i < num_rows_; ++i) norms[i] = row_norm(&cache_[static_cast<size_t>(i) * dim_], dim_, tmp_.data());
            mean = static_cast<float>(static_cast<double>(0.0f + pairwise_sum(norms.data(), num_rows_)) /
                                      static_cast<double>(num_rows_));
        }
        const double m = static_cast<double>(mean);
        const double scale = (1e-12 > m) ? 1e-12 : m;  // Python's max(m, 1e-12): m unless 1e-12 > m
        for (int64_t i = 0; i < num_rows_; ++i) {
            const double since = std::max(step - t_obs_[i], 0.0);
            out[i] = static_cast<float>(static_cast<double>(speed_[i]) * since / scale);
        }
    }

private:
    using clock = std::chrono::steady_clock;
    static double seconds_since(clock::time_point s) {
        return std::chrono::duration<double>(clock::now() - s).count();
    }
    void copy_out(const float* out, const float* w, float* rows, float* weight) const {
        if (rows && rows != out) std::memcpy(rows, out, static_cast<size_t>(num_rows_ * dim_) * sizeof(float));
        if (weight && weight != w) std::memcpy(weight, w, static_cast<size_t>(num_rows_) * sizeof(float));
    }

    int64_t num_rows_, dim_;
    uint32_t kind_;
    std::vector<float> cache_, served_, weight_, speed_, tmp_;
    std::vector<double> t_obs_;
    std::vector<int64_t> slot_, sampled_rows_, all_slots_;
    std::unique_ptr<Core> core_;
    bool self_feeding_ = false, has_served_ = false, has_fed_ = false;
    double served_step_ = 0.0, fed_step_ = 0.0;
    double predictor_s_ = 0.0;
};

struct AgentStats {
    double predictor_s = 0.0;
    int64_t tables = 0, tracked_rows = 0, predicted_slots = 0;
};

// The tables of one trainer by id; executes the protocol's operations on them.
class Agent {
public:
    HistoryTable& add_table(uint32_t id, int64_t num_rows, int64_t dim, const uint8_t* sampled, uint32_t kind,
                            const TableParams& p) {
        if (tables_.count(id)) throw Error("table " + std::to_string(id) + " already exists");
        auto t = std::make_unique<HistoryTable>(num_rows, dim, sampled, kind, p);
        HistoryTable& ref = *t;
        tables_[id] = std::move(t);
        return ref;
    }
    HistoryTable& table(uint32_t id) {
        auto it = tables_.find(id);
        if (it == tables_.end()) throw Error("no table " + std::to_string(id) + "; add_table first");
        return *it->second;
    }
    bool has(uint32_t id) const { return tables_.count(id) != 0; }
    void remove(uint32_t id) { tables_.erase(id); }
    AgentStats stats() const {
        AgentStats s;
        for (const auto& kv : tables_) {
            s.predictor_s += kv.second->predictor_s();
            s.tables += 1;
            s.tracked_rows += kv.second->num_rows();
            s.predicted_slots += kv.second->predicted_slots();
        }
        return s;
    }
    void clear() { tables_.clear(); }

private:
    std::map<uint32_t, std::unique_ptr<HistoryTable>> tables_;
};

}  // namespace table
}  // namespace sni
