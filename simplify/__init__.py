"""The nonzeroness optimizer (being written): identity until it lands."""


def optimize_and_lift_nonzeroness(tensor):
    """Identity pass for now: returns ``tensor`` unchanged."""
    return tensor
