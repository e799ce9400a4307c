"""What the tests and the benchmarks build with: agent files row by row (volumes), runtime 0.x
files (legacy), a model endpoint on 127.0.0.1 (model_server), the compaction oracle from the
SPEC (oracle), a simulated agent process (agent), and Hypothesis strategies (strategies)."""
