// A subnetwork of the Llama model (algorithms/model/llama.h): which attention head units and FFN
// channel blocks each layer computes, and which layers are trained (Hydra, DESIGN.md "Hydra
// subnetworks"; the selection policy lives in algorithms/hydra). Llama::set_subnet runs the
// model restricted to one.
//
// Units of layer l (H query heads, KV = num_kv_heads KV heads, g = H / KV query heads per KV
// head, D = C/H; without grouped-query attention KV = H and g = 1):
//   head unit j (j < KV, a KV group): KV head j with its g query heads h = j·g .. j·g + g − 1:
//                     rows [jgD, (j+1)gD) of q_proj (C, C), rows [jD, (j+1)D) of k_proj and
//                     v_proj (each (KV·D, C)), the same entries of the q/k/v biases when the
//                     model has them, and columns [jgD, (j+1)gD) of o_proj (C, C); plus the
//                     attention of its g query heads over T×T. Under grouped-query attention a
//                     query head alone is not a unit: removing it saves little (its K and V are
//                     still computed for its siblings), and a KV head kept for no query head is
//                     pure waste (docs/decisions.md).
//   FFN block b (b < G, G = ffn_blocks dividing F, Fb = F/G): rows [bFb, (b+1)Fb) of gate_proj
//                     and up_proj (each (F, C)) and columns [bFb, (b+1)Fb) of down_proj (C, F).
//                     A dense SwiGLU FFN is exactly the sum of its G channel blocks, so a block
//                     is the dense model's analogue of an MoE expert (the extension point for
//                     MoE layers: their experts become the layer's FFN units; MoE models are
//                     refused for now).
// A unit that is not kept is removed from the computation (its rows/columns are not computed,
// its attention is not run, its biases are not added): the subnetwork equals the full model
// with the removed units' outputs zeroed (o_proj columns / down_proj columns of removed units
// set to 0).
// A layer with train = true trains every unit it keeps (with its biases), and its RMSNorm gains
// (input_layernorm iff it keeps a head unit, post_attention_layernorm iff it keeps an FFN block).
// Layers with train = false run forward only: no parameter gradients, no optimizer state. The
// embedding, the final norm and the output head (tied or untied lm_head) are always kept and
// never trained by a subnetwork (frozen during fine-tuning), so the backward pass stops at the
// lowest trained layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

struct LayerSubnet {
  std::vector<uint8_t> heads;       // (KV) head units (KV groups), 1 = computed
  std::vector<uint8_t> ffn_blocks;  // (G) 1 = computed
  bool train = false;               // the layer is in the trainable set S
};

struct Subnet {
  int ffn_blocks = 1;               // G, must divide ffn_hidden
  std::vector<LayerSubnet> layers;  // (L)
};

// Head units per layer: one per KV head (num_kv_heads(cfg); = heads without grouped-query
// attention).
int head_units(const ModelConfig& cfg);
// Query heads per head unit, g = heads / num_kv_heads (1 without grouped-query attention).
int heads_per_unit(const ModelConfig& cfg);

// Every unit kept and every layer trained (train = true) or frozen (train = false).
Subnet full_subnet(const ModelConfig& cfg, int ffn_blocks, bool train);

// OK, or one line naming the first inconsistency (sizes, G not dividing F, non-0/1 entries, an
// MoE model: its FFN units are not defined yet).
Status validate(const Subnet& s, const ModelConfig& cfg);

// (numel) 1 where the element is trained by the subnetwork, 0 elsewhere; layout make_layout.
std::vector<uint8_t> trainable_mask(const Subnet& s, const ModelConfig& cfg);

// Indices (ascending) of the trained elements: the sparse form of trainable_mask, used by the
// masked optimizer and by the masked pseudo-gradient on the wire.
std::vector<uint32_t> trainable_indices(const Subnet& s, const ModelConfig& cfg);

// Lowest trained layer, or -1 when no layer is trained.
int lowest_trained_layer(const Subnet& s);

// Compact text form for logs and the protocol: one token per layer, "T" (trained) or "F"
// (frozen), then ':' head units as 0/1 digits, ':' FFN blocks as 0/1 digits; layers joined by '|'.
// e.g. "F:1111:1111|T:0110:1001".
std::string to_string(const Subnet& s);
// SHA-256 (hex) of to_string(s): the mask fingerprint a Hydra update carries.
std::string subnet_fingerprint(const Subnet& s);
StatusOr<Subnet> subnet_from_string(const std::string& text, const ModelConfig& cfg,
                                    int ffn_blocks);

}  // namespace atl::algorithms
