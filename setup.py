"""Build and install dgl-sni: the plugin, the compiled agent core and the storage tier."""
import os

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
CXX_FLAGS = ["-O3", "-std=c++17", "-fno-math-errno", "-ftree-vectorize", "-Wall", "-Wno-unused-function"]
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
        exts.append(Extension(name, sources=sources, language="c++",
                              include_dirs=[np.get_include(), HERE],
                              extra_compile_args=CXX_FLAGS,
                              define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]))
    return cythonize(exts, language_level=3, quiet=True) if exts else []


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
    entry_points={"console_scripts": ["dgl-sni=dgl_sni.cli:main", "sni-agent=dpu_agent.agent:main"]},
    zip_safe=False,
)
