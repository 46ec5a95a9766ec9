"""Full-graph GCN on Cora through the emulated cluster reaches the GCN paper's accuracy."""
import statistics

from conftest import needs_netns, read_metrics, run_cli, shared_dataset


@needs_netns
def test_cora_gcn_two_workers_reaches_paper_accuracy(tmp_path):
    shared_dataset("cora")
    accs = []
    for seed in (0, 1, 2):
        out = tmp_path / f"m{seed}.json"
        run_cli("train", "--dataset", "cora", "--workers", 2, "--model", "gcn", "--layers", 2,
                "--hidden", 16, "--epochs", 200, "--lr", 0.01, "--dropout", 0.5,
                "--weight-decay", 5e-4, "--seed", seed, "--quiet", "--metrics", out)
        summary = read_metrics(out)["summary"]
        accs.append(summary["test_acc_at_best_val"])
    # GCN paper: 0.815; measured here 0.815-0.822 per seed
    assert statistics.mean(accs) >= 0.80, accs
