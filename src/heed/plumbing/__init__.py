"""What every room stands on and none is about: files written whole (files), run locks (lock),
safe YAML (yamlio), CPU features and threads (runtime), processes and their group (distributed,
launch), and the bounds on work a user may ask for (limits). Imports nothing else of heed but
heed.errors."""
