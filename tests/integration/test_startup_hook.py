"""Zero-edit activation: the start-up .pth makes `import dgl` work in every process, and only then."""
import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

from tests.helpers import ROOT

PTH = "dgl_sni_startup.pth"


def _site_packages():
    return sysconfig.get_paths()["purelib"]


@pytest.fixture(scope="module")
def installed_pth():
    path = os.path.join(_site_packages(), PTH)
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: install the package (make install, or pip install -e .) so its "
                    f"start-up hook is in site-packages")
    with open(path) as fh, open(os.path.join(ROOT, PTH)) as ref:
        assert fh.read() == ref.read(), f"{path} differs from the checkout's {PTH}: reinstall (make install)"
    return path


def _python(code, tmp_path, **env):
    """A fresh interpreter in a folder of its own, without PYTHONPATH or any dgl_sni import."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("DGL", "PYTHONPATH"))}
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=tmp_path, env=full, timeout=300)


def test_a_script_that_never_imports_dgl_sni_imports_dgl(installed_pth, tmp_path):
    proc = _python("""
        import sys
        import dgl, dgl.graphbolt as gb
        print(dgl.__version__, gb.GRAPHBOLT_AVAILABLE, 'dgl_sni' in sys.modules,
              'dgl_sni.sni.kvstore' in sys.modules)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2.1.0", "False", "True", "False"]  # switch not loaded without the flag


def test_without_the_hook_dgl_fails_to_import_as_the_issue_says(installed_pth, tmp_path):
    proc = _python("import dgl", tmp_path, DGL_SNI_STARTUP="0")
    assert proc.returncode != 0 and "graphbolt" in proc.stderr.lower()


def test_the_hook_does_nothing_until_dgl_is_imported(installed_pth, tmp_path):
    proc = _python("""
        import os, sys
        from patches import dgl_import_hook
        print(dgl_import_hook.is_installed(), sorted(m for m in sys.modules
              if m.split('.')[0] in ('dgl', 'dgl_sni', 'torch', 'numpy')), os.environ.get('DGLBACKEND'))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "[]", "None"]


def test_flag_switches_the_plugin_on_in_spawned_children(installed_pth, tmp_path):
    """A multiprocessing child that imports dgl (as DGL's tests' servers do) gets the hook and the flag."""
    script = tmp_path / "spawn.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp

        def child(q):
            import sys
            import dgl
            from dgl.distributed import rpc
            from patches import initialize_hook
            # servers started without initialize (start_server) must answer the write notices
            q.put((dgl.__version__, 'dgl_sni.sni.kvstore' in sys.modules, initialize_hook.is_installed(),
                   906202 in rpc.SERVICE_ID_TO_PROPERTY))

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            print(*q.get(timeout=240))
            p.join()
            print(p.exitcode)
    """))
    full = {k: v for k, v in os.environ.items() if not k.startswith(("DGL", "PYTHONPATH"))}
    for flag, on in ((dict(DGL_SNI="1"), "True"), ({}, "False")):
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                              env=dict(full, **flag), timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["2.1.0", on, on, on, "0"], (flag, proc.stdout, proc.stderr[-2000:])


def test_hooks_run_around_the_package_body_and_a_wrong_dgl_is_refused(tmp_path):
    """patches.dgl_import_hook on a stand-in ``dgl`` package: before, body, after, once."""
    fake = tmp_path / "fake"
    (fake / "dgl").mkdir(parents=True)
    (fake / "dgl" / "__init__.py").write_text("import builtins; builtins.ORDER.append('body')\n")
    code = f"""
        import builtins, sys
        sys.path.insert(0, {str(fake)!r})
        builtins.ORDER = []
        from patches import dgl_import_hook as h
        before, after = (lambda: ORDER.append('before')), (lambda: ORDER.append('after'))
        h.install(before, after)
        h.install(before, after)   # the same hooks again: a no-op
        assert sys.meta_path.count(h._FINDER) == 1
        try:
            h.install(after, before)
        except RuntimeError as err:
            assert 'uninstall' in str(err)
        else:
            raise AssertionError('other hooks were accepted')
        import dgl
        import dgl
        print(*ORDER, h.is_installed(), h.fired())
    """
    proc = _python(code, tmp_path, DGL_SNI_STARTUP="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["before", "body", "after", "False", "True"]
    refused = _python("""
        import sys
        from importlib import metadata
        sys.path.insert(0, %r)
        real = metadata.version
        metadata.version = lambda name: '2.3.0' if name == 'dgl' else real(name)
        from patches import dgl_import_hook as h
        h.install(None, None)
        import dgl
    """ % str(fake), tmp_path, DGL_SNI_STARTUP="0")
    assert refused.returncode != 0
    assert "patches.dgl_import_hook" in refused.stderr and "DGL 2.3.0" in refused.stderr


def test_setup_ships_the_pth_in_normal_installs(tmp_path):
    """A built wheel carries the .pth at its top level (site-packages); editable installs: see above."""
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, SNI_BUILD_ONLY="none"))  # no extension is compiled
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheel, = [p for p in tmp_path.iterdir() if p.suffix == ".whl"]
    with zipfile.ZipFile(wheel) as z:
        assert PTH in z.namelist()
        assert z.read(PTH).decode() == open(os.path.join(ROOT, PTH)).read()
