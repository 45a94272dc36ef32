"""What the data benchmarks (datasize, dataload, train-e2e) share: the data trial and its runner, the corpus
and datasets, the loader images, their flag checks and report caveats. Not a benchmark (the registry lists
none here)."""
