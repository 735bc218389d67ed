"""Element-wise error function for NumPy arrays (context file of the GELU paper)."""
import math

import numpy as np

erf = np.vectorize(math.erf, otypes=[float])
