"""Stand-in: importing mmcv never returns (a deadlock in a native initialiser)."""
import time

while True:
    time.sleep(60)
