"""Two cases: a completion passes only when both run and both see a doubled number."""
import unittest

import solution


class TestSolve(unittest.TestCase):
    def test_one(self):
        self.assertEqual(solution.solve(21), 42)

    def test_many(self):
        self.assertEqual([solution.solve(i) for i in range(3)], [0, 2, 4])


if __name__ == "__main__":
    unittest.main()
