// The DOCA C functions the agent's DOCA transport calls, loaded at run time with dlopen/dlsym.
//
// Declared here from NVIDIA's public DOCA 2.x API documentation (no SDK header is used):
// every DOCA object is an opaque pointer, doca_error_t an int, union doca_data an 8-byte union
// passed by value. Libraries: libdoca_common.so, libdoca_dma.so, libdoca_comch.so in the
// directory given (--lib-dir), else $DOCA_LIB_DIR, else /opt/mellanox/doca/lib/<arch>-linux-gnu;
// the tests point DOCA_LIB_DIR at the simulated SDK (tests/doca_sim). Used by doca_transport.cpp only.
#pragma once
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace sni {
namespace agent {
namespace doca {

using Err = int;  // doca_error_t
constexpr Err kSuccess = 0, kAgain = 5, kInvalidValue = 6, kNoMemory = 7, kTimeOut = 9, kNotFound = 16,
              kInProgress = 26;
constexpr int kCtxIdle = 0, kCtxRunning = 2;             // enum doca_ctx_states
constexpr uint32_t kAccessLocalReadWrite = 1u << 0;       // enum doca_access_flag
constexpr int kRepFilterNet = 1 << 1;                     // enum doca_devinfo_rep_filter

union Data {  // union doca_data
    void* ptr;
    uint64_t u64;
};
using P = void*;
using TaskCb = void (*)(P task, Data task_user_data, Data ctx_user_data);
using RecvCb = void (*)(P event, uint8_t* buf, uint32_t len, P conn);
using ConnCb = void (*)(P event, P conn, uint8_t ok);

// One member per bound function (name = the DOCA function without its doca_ prefix).
struct Api {
    // libdoca_common
    const char* (*error_get_name)(Err);
    Err (*devinfo_create_list)(P**, uint32_t*);
    Err (*devinfo_destroy_list)(P*);
    Err (*devinfo_is_equal_pci_addr)(P, const char*, uint8_t*);
    Err (*dev_open)(P, P*);
    Err (*dev_close)(P);
    P (*dev_as_devinfo)(P);
    Err (*devinfo_rep_create_list)(P, int, P**, uint32_t*);
    Err (*devinfo_rep_destroy_list)(P*);
    Err (*devinfo_rep_is_equal_pci_addr)(P, const char*, uint8_t*);
    Err (*dev_rep_open)(P, P*);
    Err (*dev_rep_close)(P);
    Err (*mmap_create)(P*);
    Err (*mmap_add_dev)(P, P);
    Err (*mmap_set_permissions)(P, uint32_t);
    Err (*mmap_set_memrange)(P, void*, size_t);
    Err (*mmap_start)(P);
    Err (*mmap_create_from_export)(const void*, const void*, size_t, P, P*);
    Err (*mmap_destroy)(P);
    Err (*buf_inventory_create)(size_t, P*);
    Err (*buf_inventory_start)(P);
    Err (*buf_inventory_destroy)(P);
    Err (*buf_inventory_buf_get_by_args)(P, P, void*, size_t, void*, size_t, P*);
    Err (*buf_set_data)(P, void*, size_t);
    Err (*buf_dec_refcount)(P, uint16_t*);
    Err (*pe_create)(P*);
    Err (*pe_destroy)(P);
    Err (*pe_connect_ctx)(P, P);
    uint8_t (*pe_progress)(P);
    Err (*ctx_start)(P);
    Err (*ctx_stop)(P);
    Err (*ctx_get_state)(P, int*);
    Err (*task_submit)(P);
    void (*task_free)(P);
    Err (*task_get_status)(P);
    // libdoca_dma
    Err (*dma_cap_task_memcpy_is_supported)(P);
    Err (*dma_cap_task_memcpy_get_max_buf_size)(P, uint64_t*);
    Err (*dma_create)(P, P*);
    Err (*dma_destroy)(P);
    P (*dma_as_ctx)(P);
    Err (*dma_task_memcpy_set_conf)(P, TaskCb, TaskCb, uint32_t);
    Err (*dma_task_memcpy_alloc_init)(P, P, P, Data, P*);
    P (*dma_task_memcpy_as_task)(P);
    // libdoca_comch
    Err (*comch_cap_get_max_msg_size)(P, uint32_t*);
    Err (*comch_cap_server_is_supported)(P);
    Err (*comch_server_create)(P, P, const char*, P*);
    Err (*comch_server_destroy)(P);
    Err (*comch_server_set_max_msg_size)(P, uint32_t);
    Err (*comch_server_set_recv_queue_size)(P, uint32_t);
    P (*comch_server_as_ctx)(P);
    Err (*comch_server_task_send_set_conf)(P, TaskCb, TaskCb, uint32_t);
    Err (*comch_server_event_msg_recv_register)(P, RecvCb);
    Err (*comch_server_event_connection_status_changed_register)(P, ConnCb, ConnCb);
    Err (*comch_server_disconnect)(P, P);
    Err (*comch_server_task_send_alloc_init)(P, P, const void*, uint32_t, P*);
    P (*comch_task_send_as_task)(P);
};

// A failed DOCA call: names the function and the error.
class Error : public std::runtime_error {
public:
    Error(const std::string& what, Err code) : std::runtime_error(what), code(code) {}
    Err code;
};

inline std::string default_lib_dir() {
    if (const char* d = std::getenv("DOCA_LIB_DIR")) if (*d) return d;
#if defined(__aarch64__)
    return "/opt/mellanox/doca/lib/aarch64-linux-gnu";
#else
    return "/opt/mellanox/doca/lib/x86_64-linux-gnu";
#endif
}

// dlopen the three libraries of `dir` and resolve every member of `api` (throws a message
// naming the missing library or symbol). The handles stay open for the life of the process.
inline void load(const std::string& dir_in, Api* api) {
    const std::string dir = dir_in.empty() ? default_lib_dir() : dir_in;
    void* libs[3];
    const char* parts[3] = {"common", "dma", "comch"};
    for (int i = 0; i < 3; ++i) {
        const std::string path = dir + "/libdoca_" + parts[i] + ".so";
        libs[i] = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (!libs[i]) {
            const char* e = dlerror();
            throw std::runtime_error("cannot load the DOCA library " + path + " (" + (e ? e : "?") +
                                     "): install DOCA, or give --lib-dir / DOCA_LIB_DIR, the directory "
                                     "holding libdoca_common.so, libdoca_dma.so and libdoca_comch.so");
        }
    }
    auto bind = [&](void* lib, const char* name, const char* older, auto** fn) {
        void* s = dlsym(lib, name);
        if (!s && older) s = dlsym(lib, older);
        if (!s) throw std::runtime_error(dir + ": DOCA has no symbol " + name + " (DOCA 2.5 or newer is needed)");
        *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(s);
    };
    void* c = libs[0];
    void* d = libs[1];
    void* m = libs[2];
#define SNI_BIND(lib, fn) bind(lib, "doca_" #fn, nullptr, &api->fn)
    SNI_BIND(c, error_get_name); SNI_BIND(c, devinfo_create_list); SNI_BIND(c, devinfo_destroy_list);
    SNI_BIND(c, devinfo_is_equal_pci_addr); SNI_BIND(c, dev_open); SNI_BIND(c, dev_close);
    SNI_BIND(c, dev_as_devinfo); SNI_BIND(c, devinfo_rep_create_list); SNI_BIND(c, devinfo_rep_destroy_list);
    SNI_BIND(c, devinfo_rep_is_equal_pci_addr); SNI_BIND(c, dev_rep_open); SNI_BIND(c, dev_rep_close);
    SNI_BIND(c, mmap_create); SNI_BIND(c, mmap_add_dev); SNI_BIND(c, mmap_set_permissions);
    SNI_BIND(c, mmap_set_memrange); SNI_BIND(c, mmap_start); SNI_BIND(c, mmap_create_from_export);
    SNI_BIND(c, mmap_destroy); SNI_BIND(c, buf_inventory_create); SNI_BIND(c, buf_inventory_start);
    SNI_BIND(c, buf_inventory_destroy); SNI_BIND(c, buf_inventory_buf_get_by_args); SNI_BIND(c, buf_set_data);
    SNI_BIND(c, buf_dec_refcount); SNI_BIND(c, pe_create); SNI_BIND(c, pe_destroy); SNI_BIND(c, pe_connect_ctx);
    SNI_BIND(c, pe_progress); SNI_BIND(c, ctx_start); SNI_BIND(c, ctx_stop); SNI_BIND(c, ctx_get_state);
    SNI_BIND(c, task_submit); SNI_BIND(c, task_free); SNI_BIND(c, task_get_status);
    SNI_BIND(d, dma_cap_task_memcpy_is_supported); SNI_BIND(d, dma_cap_task_memcpy_get_max_buf_size);
    SNI_BIND(d, dma_create); SNI_BIND(d, dma_destroy); SNI_BIND(d, dma_as_ctx); SNI_BIND(d, dma_task_memcpy_set_conf);
    SNI_BIND(d, dma_task_memcpy_alloc_init); SNI_BIND(d, dma_task_memcpy_as_task);
    SNI_BIND(m, comch_cap_get_max_msg_size); SNI_BIND(m, comch_cap_server_is_supported);
    SNI_BIND(m, comch_server_create); SNI_BIND(m, comch_server_destroy); SNI_BIND(m, comch_server_set_max_msg_size);
    SNI_BIND(m, comch_server_set_recv_queue_size); SNI_BIND(m, comch_server_as_ctx);
    SNI_BIND(m, comch_server_task_send_set_conf); SNI_BIND(m, comch_server_event_msg_recv_register);
    SNI_BIND(m, comch_server_disconnect); SNI_BIND(m, comch_server_task_send_alloc_init);
    SNI_BIND(m, comch_task_send_as_task);
#undef SNI_BIND
    bind(m, "doca_comch_server_event_connection_status_changed_register",
         "doca_comch_server_event_connection_register",  // the DOCA 2.5 name
         &api->comch_server_event_connection_status_changed_register);
}

}  // namespace doca
}  // namespace agent
}  // namespace sni
