// The batched attention kernel's fragment maps (native/cuda/src/mma_layout.hpp)
// on the host, no GPU needed: every m16n8k16 fragment covers its tile
// exactly once, the pairs the kernel loads or stores as one word are
// neighbours in a row, and ldmatrix.x4.trans of a row-major V tile, as the
// PTX ISA describes it, yields exactly P V's B fragments.
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "mma_layout.hpp"

namespace entgraph::cuda::detail::mma {
namespace {

// How many (lane, element) pairs land on each cell of a rows x cols tile;
// false if one falls outside.
template <class Map>
bool cover(int rows, int cols, int elements, Map map, std::vector<int>& hits) {
  hits.assign(static_cast<std::size_t>(rows * cols), 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < elements; ++i) {
      const Coord c = map(lane, i);
      if (c.row < 0 || c.row >= rows || c.col < 0 || c.col >= cols) return false;
      ++hits[static_cast<std::size_t>(c.row * cols + c.col)];
    }
  return true;
}

bool once_each(const std::vector<int>& hits) {
  for (int h : hits)
    if (h != 1) return false;
  return true;
}

}  // namespace

TEST_SUITE("cuda_host") {
  TEST_CASE("mma m16n8k16: A, B and C fragments cover their tiles exactly once") {
    std::vector<int> hits;
    CHECK(cover(16, 16, 8, a_element, hits));
    CHECK(once_each(hits));
    CHECK(cover(16, 8, 4, b_element, hits));
    CHECK(once_each(hits));
    CHECK(cover(16, 8, 4, c_element, hits));
    CHECK(once_each(hits));
  }

  TEST_CASE("mma m16n8k16: the PTX ISA's formulas, element by element") {
    for (int lane = 0; lane < 32; ++lane) {
      const int group = lane >> 2, t = lane % 4;
      for (int i = 0; i < 8; ++i) {
        const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
        const int col = i < 4 ? t * 2 + (i & 1) : t * 2 + (i & 1) + 8;
        CHECK(a_element(lane, i).row == row);
        CHECK(a_element(lane, i).col == col);
      }
      for (int i = 0; i < 4; ++i) {
        CHECK(b_element(lane, i).row == (i < 2 ? t * 2 + (i & 1) : t * 2 + (i & 1) + 8));
        CHECK(b_element(lane, i).col == group);
        CHECK(c_element(lane, i).row == (i < 2 ? group : group + 8));
        CHECK(c_element(lane, i).col == t * 2 + (i & 1));
      }
    }
  }

  TEST_CASE("mma m16n8k16: each register's two elements are neighbours, as the kernel loads them") {
    for (int lane = 0; lane < 32; ++lane) {
      // A from Q and P rows: (row, col), (row, col + 1), col even (4- and 8-byte aligned loads).
      for (int r = 0; r < 4; ++r) {
        const Coord first = a_element(lane, 2 * r), second = a_element(lane, 2 * r + 1);
        CHECK(second.row == first.row);
        CHECK(second.col == first.col + 1);
        CHECK(first.col % 2 == 0);
      }
      // B(k, c) read from K(c, k): consecutive k in one K row.
      for (int r = 0; r < 2; ++r) {
        const Coord first = b_element(lane, 2 * r), second = b_element(lane, 2 * r + 1);
        CHECK(second.col == first.col);
        CHECK(second.row == first.row + 1);
        CHECK(first.row % 2 == 0);
      }
      // C stored as pairs (float2 or two 16-bit values).
      for (int r = 0; r < 2; ++r) {
        const Coord first = c_element(lane, 2 * r), second = c_element(lane, 2 * r + 1);
        CHECK(second.row == first.row);
        CHECK(second.col == first.col + 1);
        CHECK(first.col % 2 == 0);
      }
      // The kernel's two rows per thread: c elements 0 and 2, 8 rows apart.
      CHECK(c_element(lane, 2).row == c_element(lane, 0).row + 8);
      CHECK(c_element(lane, 2).col == c_element(lane, 0).col);
    }
  }

  TEST_CASE("pack_pair: the element with the smaller index in the low half") {
    CHECK(pack_pair(0x1234, 0xabcd) == 0xabcd1234u);
    CHECK(pack_pair(0xffff, 0) == 0x0000ffffu);
  }

  TEST_CASE("ldmatrix.x4.trans of a row-major V tile gives P V's B fragments") {
    // A 16 x 16 block of V (keys x columns), each entry naming its own coordinates.
    const auto id = [](int key, int col) { return key * 16 + col; };
    // The addresses: lane l points at row v_block_row(l) of the block; matrix
    // j's row r is the one lane 8 j + r gives (8 consecutive columns).
    std::array<std::array<std::array<int, 8>, 8>, 4> matrix{};  // [j][row][col]
    for (int lane = 0; lane < 32; ++lane) {
      const Coord start = v_block_row(lane);
      CHECK(start.col % 8 == 0);  // 16-byte aligned rows of 8 values
      for (int c = 0; c < 8; ++c) matrix[ldmatrix_matrix(lane)][ldmatrix_row(lane)][c] = id(start.row, start.col + c);
    }
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < 4; ++j)
        for (int h = 0; h < 2; ++h) {
          const Coord e = ldmatrix_trans_element(lane, h);
          const int got = matrix[j][e.row][e.col];
          // Registers 0, 1: B elements (2 j + h) of columns 0..7; 2, 3: of columns 8..15.
          const int column_tile = j / 2;
          const Coord b = b_element(lane, 2 * (j % 2) + h);  // (k = key, n = column in the tile)
          CAPTURE(lane);
          CAPTURE(j);
          CAPTURE(h);
          CHECK(got == id(b.row, 8 * column_tile + b.col));
        }
  }

  TEST_CASE("ldmatrix row addresses: each row of the 16 x 16 block once per column half") {
    std::vector<int> hits(32, 0);
    for (int lane = 0; lane < 32; ++lane) {
      const Coord start = v_block_row(lane);
      REQUIRE(start.row >= 0);
      REQUIRE(start.row < 16);
      ++hits[static_cast<std::size_t>(start.row * 2 + start.col / 8)];
    }
    CHECK(once_each(hits));
  }
}

}  // namespace entgraph::cuda::detail::mma
