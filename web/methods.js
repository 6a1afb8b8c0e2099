// What each predictor does, in one or two sentences for students
// (docs/PREDICTORS.md has the details), and how its slider reads. Its name
// (methodLabel) is the package's, as in a notebook's figures.
import { methodLabel } from "./entgraph/render.js";

export { methodLabel };

export const METHOD_INFO = {
  window: {
    blurb: "Each token looks at its w nearest neighbours (only earlier ones for the causal model). No learning; a fixed band around the diagonal.",
    slider: "half-width w",
  },
  global: {
    blurb: "The first g tokens are “global”: they see everything and everyone sees them. A fixed pattern: the first columns and rows.",
    slider: "global tokens g",
  },
  longformer: {
    blurb: "Longformer (2020): a local window plus g global tokens.",
    slider: "global tokens g",
  },
  bigbird: {
    blurb: "BigBird (2020): window and global tokens plus r random keys per query. Random edges rarely land on the true ones.",
    slider: "random keys r",
  },
  reformer: {
    blurb: "Reformer (2020): queries and keys are hashed by random rotations into B buckets; a query is linked to the keys in its bucket. More buckets: smaller buckets, sparser graph.",
    slider: "buckets B",
  },
  routing: {
    blurb: "Routing Transformer (2021): queries and keys are grouped into c clusters (learned by k-means on training text); a query sees the keys of its cluster.",
    slider: "clusters c",
  },
  "sparsefinder-distance": {
    blurb: "Sparsefinder (2022): a small learned projection puts each query near the keys it attends to; a query is linked to every key closer than t.",
    slider: "distance threshold t",
  },
  "sparsefinder-quantization": {
    blurb: "Sparsefinder (2022): the learned projection's coordinates are cut into B bins; a query is linked to the keys sharing a bin in some coordinate.",
    slider: "bins per coordinate B",
  },
  "sparsefinder-kmeans": {
    blurb: "Sparsefinder (2022): k-means clusters in the learned projection; a query is linked to the keys of its cluster.",
    slider: "clusters k",
  },
  "lowrank-threshold": {
    blurb: "entgraph's own: a cheap estimate of every score (queries and keys in a basis fitted in closed form on training text, rounded to 6-bit integers), then each query keeps the keys its estimated row would give weight to (its own entmax threshold), widened or narrowed by a margin.",
    slider: "threshold margin",
  },
};
