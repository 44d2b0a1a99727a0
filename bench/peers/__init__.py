"""The servers quiver is compared against, each run as a separate process."""
