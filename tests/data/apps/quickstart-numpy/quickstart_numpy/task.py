"""quickstart-numpy: A Flower / NumPy app."""

import numpy as np


def get_dummy_model():
    return [np.ones((1, 1))]
