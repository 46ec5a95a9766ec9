"""Rank 0's progress bar: redrawn as usual on a terminal, rarely in a log file."""
import io

from dgl_sni.progress import LOG_INTERVAL_S, Progress, progress_bar


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_file_is_redrawn_every_few_seconds_a_terminal_as_usual():
    log = io.StringIO()
    logged = progress_bar(50, "train", file=log)
    shown = progress_bar(50, "train", file=_Terminal())
    assert LOG_INTERVAL_S >= 5 and logged.mininterval == LOG_INTERVAL_S and shown.mininterval < 1
    for bar in (logged, shown):
        for _ in range(50):
            bar.update(1)
        bar.close()
    draws = [d for d in log.getvalue().split("\r") if d.strip()]
    assert 1 <= len(draws) <= 3 and "50/50" in draws[-1]  # the opening draw and the final one


def test_quiet_draws_nothing_and_the_launchers_file_gets_json_lines(tmp_path):
    assert Progress(10, quiet=True, path=None).bar is None
    path = str(tmp_path / "events.jsonl")
    progress = Progress(10, quiet=False, path=path)  # the launcher's file: no bar of its own
    assert progress.bar is None
    progress.update(dict(epoch=0, mode="sync", loss=1.0))
    progress.close(dict(epochs=1))
    with open(path) as fh:
        lines = fh.read().splitlines()
    assert len(lines) == 2 and '"event": "epoch"' in lines[0] and '"event": "done"' in lines[1]


def _draws(text):
    return [d for d in text.split("\r") if d.strip()]


def test_a_training_run_logged_to_a_file_is_not_redrawn_per_epoch(monkeypatch, tmp_path):
    """Rank 0's own bar and the launcher's bar over the progress file both leave a log
    a handful of lines for 50 epochs, the last with the final loss."""
    import json
    from dgl_sni.cli import _ProgressTail
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    progress = Progress(50, quiet=False, path=None)
    for epoch in range(50):
        progress.update(dict(epoch=epoch, mode="sync", loss=1.0 / (epoch + 1), val_acc=0.5))
    progress.close(dict(epochs=50))
    draws = _draws(log.getvalue())
    assert 1 <= len(draws) <= 3 and "50/50" in draws[-1] and "loss=0.0200" in draws[-1]

    events = tmp_path / "progress.jsonl"
    lines = [dict(event="starting")] + [dict(event="epoch", epoch=e, mode="stale" if e % 2 else "sync",
                                             loss=1.0 / (e + 1), val_acc=0.5) for e in range(50)]
    events.write_text("".join(json.dumps(x) + "\n" for x in lines) + json.dumps(dict(event="done", summary={})) + "\n")
    log.seek(0)
    log.truncate()
    tail = _ProgressTail(str(events), 50, quiet=False)
    tail.poll()
    tail.close()
    draws = _draws(log.getvalue())
    assert 1 <= len(draws) <= 4 and "50/50" in draws[-1] and "loss=0.0200" in draws[-1]
    assert tail.summary == {}
