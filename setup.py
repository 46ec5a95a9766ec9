"""Build and install dgl-sni: the plugin, the compiled agent core and the storage tier."""
import glob
import importlib.util
import os

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_binary():
    """dpu_agent/binary.py, loaded by path (the package itself is not importable yet): it reads
    the compiler flags of every build (dpu_agent/csrc/cxxflags.txt) and builds the agent."""
    spec = importlib.util.spec_from_file_location("sni_binary", os.path.join(HERE, "dpu_agent", "binary.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


binary = _load_binary()
EXTENSIONS = [
    # (module, sources) -- Cython front ends over small dependency-free C++ cores
    ("dgl_sni._ops", ["dgl_sni/_ops.pyx"]),
    ("dpu_agent._core", ["dpu_agent/_core.pyx"]),
    ("storage_tier._lp", ["storage_tier/_lp.pyx"]),
]


def extensions():
    """Cythonized extensions; ``SNI_BUILD_ONLY=mod1,mod2`` restricts the build (development)."""
    only = {m for m in os.environ.get("SNI_BUILD_ONLY", "").split(",") if m}
    exts = []
    for name, sources in EXTENSIONS:
        if only and name not in only:
            continue
        if not all(os.path.exists(os.path.join(HERE, s)) for s in sources):
            continue
        headers = glob.glob(os.path.join(os.path.dirname(sources[0]), "csrc", "*.hpp"))
        exts.append(Extension(name, sources=sources, language="c++", depends=sorted(headers),  # rebuilt when they change
                              include_dirs=[np.get_include(), HERE],
                              extra_compile_args=binary.cxxflags("extension"),
                              define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]))
    return cythonize(exts, language_level=3, quiet=True) if exts else []


# The start-up hook: a .pth file in site-packages registers patches.dgl_import_hook in every
# Python process, so `import dgl` works (and DGL_SNI=1 switches the plugin on) in scripts that
# never import dgl_sni. It only registers a finder; nothing runs until dgl is imported.
STARTUP_PTH = "dgl_sni_startup.pth"


class BuildPyWithStartup(build_py):
    """Normal installs (wheels): the .pth goes to the top of the built tree, i.e. site-packages."""

    def run(self):
        super().run()
        if not self.editable_mode:
            self.copy_file(os.path.join(HERE, STARTUP_PTH), os.path.join(self.build_lib, STARTUP_PTH))

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else outputs + [os.path.join(self.build_lib, STARTUP_PTH)]


class EditableWheelWithStartup(editable_wheel):
    """Editable installs (pip install -e .): the editable wheel carries the .pth too."""

    def _select_strategy(self, name, tag, build_lib):
        strategy = super()._select_strategy(name, tag, build_lib)

        class _WithStartup:
            def __enter__(self):
                strategy.__enter__()
                return self

            def __exit__(self, *exc):
                return strategy.__exit__(*exc)

            def __call__(self, wheel, files, mapping):
                strategy(wheel, files, mapping)
                with open(os.path.join(HERE, STARTUP_PTH)) as fh:
                    wheel.writestr(STARTUP_PTH, fh.read())

        return _WithStartup()


class BuildWithAgent(build_ext):
    """Builds the extensions, then the standalone ``sni-agent`` executable (C++17, g++) into
    ``dpu_agent/bin/`` (in place, or in the build tree for an install)."""

    def run(self):
        super().run()
        only = {m for m in os.environ.get("SNI_BUILD_ONLY", "").split(",") if m}
        if only and "sni-agent" not in only:
            return
        root = HERE if self.inplace else self.build_lib
        binary.build(os.path.join(root, "dpu_agent", "bin", "sni-agent"))


with open(os.path.join(HERE, "requirements.txt")) as fh:
    REQUIREMENTS = [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")
                    and not ln.lower().startswith(("pytest", "cython", "setuptools"))]

setup(
    name="dgl-sni",
    version="0.1.0",
    description="Exact, communication-efficient and memory-unbounded full-graph training for DistDGL",
    packages=find_packages(include=["dgl_sni*", "dpu_agent*", "storage_tier*", "patches*"]),
    python_requires=">=3.10",
    install_requires=REQUIREMENTS,
    extras_require={"test": ["pytest==9.2.0", "pytest-benchmark==5.3.1"]},
    ext_modules=extensions(),
    package_data={"dpu_agent": ["bin/sni-agent", "csrc/*.hpp", "csrc/cxxflags.txt", "csrc/agent/*.hpp",
                               "csrc/agent/*.cpp"],
                  "dgl_sni": ["costs.json"]},  # the cost model's constants, fitted to the results report's runs
    entry_points={"console_scripts": ["dgl-sni=dgl_sni.cli:main", "sni-agent=dpu_agent.agent:main"]},
    cmdclass={"build_py": BuildPyWithStartup, "editable_wheel": EditableWheelWithStartup,
              "build_ext": BuildWithAgent},
    zip_safe=False,
)
