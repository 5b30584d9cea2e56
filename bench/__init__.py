"""Speed benchmarks, run from the repository root: python -m bench.bench (CPU, this tree beside a commit),
python -m bench.bench_gpu (decode ms/step at Qwen3-1.7B's shape on a CUDA GPU)."""
