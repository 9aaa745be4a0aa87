# The two commands of the README.
.PHONY: run test bench bench-flush bench-apps bench-cluster fmt lint

# Build and start the daemon on its embedded default configuration.
run:
	scripts/build-deps.sh
	cargo run --release -p flexssd -- serve

# Install missing test tools (as root) and run every test.
test:
	scripts/test.sh

# NBD data-path benchmark against nbdkit memory (not part of the tests).
bench:
	scripts/bench-nbd.sh

# What a flush costs: flexssd's default configuration against nbdkit file.
bench-flush:
	scripts/bench-flush.sh

# PostgreSQL and RocksDB on ext4 and btrfs over flexssd and nbdkit (root).
bench-apps:
	scripts/bench-apps.sh

# Fleet scale benchmark: 1,000 host agents and a scheduler on one etcd.
bench-cluster:
	scripts/bench-cluster.sh

fmt:
	cargo fmt --all

lint:
	cargo clippy --workspace --all-targets -- -D warnings
