// sni-agent: serves one trainer's stale halo rows (see dpu_agent/csrc/agent/serve.hpp).
// Linked with one translation unit per transport: shm_transport.cpp, doca_transport.cpp.
//
//   sni-agent --socket PATH --token-file FILE [--once]   host: Unix socket + shared memory
//   sni-agent --doca --pci ADDR [--name NAME] [--rep-pci ADDR] [--lib-dir DIR]   BlueField DPU
//
// Dependency-free C++17 (libc and libstdc++ only); DOCA is loaded with dlopen at run time.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "doca_transport.hpp"
#include "serve.hpp"
#include "shm_transport.hpp"

namespace sni {
namespace agent {
volatile std::sig_atomic_t g_stop = 0;
}
}  // namespace sni

static void on_signal(int) { sni::agent::g_stop = 1; }

static int usage(const char* msg) {
    std::fprintf(stderr,
                 "usage: sni-agent --socket PATH --token-file FILE [--once]\n"
                 "       sni-agent --doca --pci ADDR [--name NAME] [--rep-pci ADDR] [--lib-dir DIR]\n"
                 "sni-agent: error: %s\n", msg);
    return 2;
}

static bool read_token(const std::string& file, std::string* token, std::string* err) {
    std::ifstream in(file, std::ios::binary);
    if (!in) { *err = "cannot read the token file " + file; return false; }
    std::string hex;
    in >> hex;
    if (hex.size() != 2 * sni::proto::kTokenBytes) { *err = "the token file must hold 64 hex digits"; return false; }
    token->clear();
    for (size_t i = 0; i < hex.size(); i += 2) {
        char* end = nullptr;
        const std::string byte = hex.substr(i, 2);
        const long v = std::strtol(byte.c_str(), &end, 16);
        if (end != byte.c_str() + 2) { *err = "the token file must hold 64 hex digits"; return false; }
        token->push_back(static_cast<char>(v));
    }
    return true;
}

int main(int argc, char** argv) {
    std::string socket_path, token_file, pci, name = "sni-agent", rep_pci, lib_dir;
    bool once = false, doca = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&](std::string* dst) {
            if (i + 1 >= argc) return false;
            *dst = argv[++i];
            return true;
        };
        if (a == "--socket") { if (!value(&socket_path)) return usage("--socket needs a path"); }
        else if (a == "--token-file") { if (!value(&token_file)) return usage("--token-file needs a path"); }
        else if (a == "--once") once = true;
        else if (a == "--doca") doca = true;
        else if (a == "--pci") { if (!value(&pci)) return usage("--pci needs an address"); }
        else if (a == "--name") { if (!value(&name)) return usage("--name needs a value"); }
        else if (a == "--rep-pci") { if (!value(&rep_pci)) return usage("--rep-pci needs an address"); }
        else if (a == "--lib-dir") { if (!value(&lib_dir)) return usage("--lib-dir needs a directory"); }
        else if (a == "--help" || a == "-h") { usage("help"); return 0; }
        else return usage(("unknown argument " + a).c_str());
    }
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    try {
        std::unique_ptr<sni::agent::Transport> t;
        if (doca) {
            if (pci.empty()) return usage("--doca needs --pci (the BlueField device's PCI address)");
            if (rep_pci.empty() && std::getenv("SNI_DOCA_REP_PCI")) rep_pci = std::getenv("SNI_DOCA_REP_PCI");
            t = sni::agent::make_doca_transport(pci, name, rep_pci, lib_dir);
        } else if (!socket_path.empty()) {
            if (token_file.empty()) return usage("--socket needs --token-file");
            std::string token, err;
            if (!read_token(token_file, &token, &err)) return usage(err.c_str());
            t = sni::agent::make_shm_transport(socket_path, token, once);
        } else {
            return usage("give --socket PATH --token-file FILE (host emulation) or --doca --pci ADDR (DPU)");
        }
        sni::agent::Server server(*t);
        server.run();
    } catch (const std::exception& e) {
        sni::agent::log(std::string("error: ") + e.what());
        return 1;
    }
    return 0;
}
