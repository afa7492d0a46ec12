"""What mmstack's own steps cost: solving and locking, the verify ladder, mmcv's start-up."""
