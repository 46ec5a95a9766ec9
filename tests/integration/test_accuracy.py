"""Full-graph GCN on Cora through the emulated cluster reaches the GCN paper's accuracy."""
import statistics

from tests.helpers import needs_netns, shared_dataset, train_sweep


@needs_netns
def test_cora_gcn_two_workers_reaches_paper_accuracy(tmp_path):
    shared_dataset("cora")
    seeds = (0, 1, 2)  # one after another on one cluster (a sweep)
    runs = train_sweep(tmp_path, [dict(seed=seed) for seed in seeds], "--dataset", "cora", "--workers", 2,
                       "--model", "gcn", "--layers", 2, "--hidden", 16, "--epochs", 200, "--lr", 0.01,
                       "--dropout", 0.5, "--weight-decay", 5e-4)
    assert [m["config"]["seed"] for m, _ in runs] == list(seeds)
    accs = [m["summary"]["test_acc_at_best_val"] for m, _ in runs]
    # GCN paper: 0.815; measured here 0.815-0.822 per seed
    assert statistics.mean(accs) >= 0.80, accs
