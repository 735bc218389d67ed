"""Two cases: a completion passes only when both run and both agree with the reference copy."""
import unittest

import solution
import solution_ref


class TestSolve(unittest.TestCase):
    def test_one(self):
        self.assertEqual(solution.solve(21), solution_ref.solve(21))

    def test_many(self):
        self.assertEqual([solution.solve(i) for i in range(3)], [solution_ref.solve(i) for i in range(3)])


if __name__ == "__main__":
    unittest.main()
