"""``python -m agent run …`` behaves exactly like ``proxima-agent run …``."""

from agent.cli import main

if __name__ == "__main__":
    main()
