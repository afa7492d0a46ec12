"""How fast a detector trains: mmdet against torchvision, per stage and per op, and what mmengine's Runner adds."""
