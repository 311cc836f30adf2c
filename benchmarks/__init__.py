"""Performance runs apart from the tests, on the tests' harness: `python -m benchmarks.bench`,
`python -m benchmarks.demo`, run from the checkout's root."""
