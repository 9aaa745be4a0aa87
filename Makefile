# The two commands of the README.
.PHONY: run test bench fmt lint

# Build and start the daemon on its embedded default configuration.
run:
	cargo run --release -p flexssd -- serve

# Install missing test tools (as root) and run every test.
test:
	scripts/test.sh

# NBD data-path benchmark against nbdkit memory (not part of the tests).
bench:
	scripts/bench-nbd.sh

fmt:
	cargo fmt --all

lint:
	cargo clippy --workspace --all-targets -- -D warnings
