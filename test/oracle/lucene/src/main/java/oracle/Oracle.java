package oracle;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.PrintStream;
import java.io.StringReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.LowerCaseFilter;
import org.apache.lucene.analysis.StopFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.Tokenizer;
import org.apache.lucene.analysis.core.WhitespaceTokenizer;
import org.apache.lucene.analysis.en.EnglishAnalyzer;
import org.apache.lucene.analysis.en.EnglishPossessiveFilter;
import org.apache.lucene.analysis.en.PorterStemFilter;
import org.apache.lucene.analysis.standard.StandardTokenizer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.document.BinaryDocValuesField;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.FieldType;
import org.apache.lucene.document.StoredField;
import org.apache.lucene.document.StringField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.BinaryDocValues;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexOptions;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.Term;
import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.ByteBuffersDirectory;
import org.apache.lucene.store.FSDirectory;
import org.apache.lucene.util.BytesRef;

/**
 * The reference our BM25 is tested against. Modes (UTF-8 files, one item per line):
 *   analyze TEXTS      each line: the analysed tokens of that text, space-separated
 *   tokenize TEXTS     each line: StandardTokenizer's tokens only, separated by U+0001
 *   stem WORDS         each line: Lucene's Porter stem of that (lowercase) word
 *   norms N            for lengths 0..N: length TAB SmallFloat.intToByte4 TAB byte4ToInt
 *   search CORPUS QUERIES K [k1 b]   CORPUS: id TAB contents (\n escaped as \\n); prints qid TAB rank TAB id TAB score,
 *                      ranked by score desc then id asc (Anserini's order), for each query's top K
 *   bench CORPUS INDEXDIR K   the timing mode of `npm run bench bm25`: indexes CORPUS into INDEXDIR (on disk, once:
 *                      one thread, docs and freqs as BM25 needs — no positions —, the id also as doc values,
 *                      contents stored, merged to one segment) unless it is there, prints a JSON line with the
 *                      build's time and peak RSS, then answers commands on stdin: `search NAME QUERIES RESULTS`
 *                      runs every query with a single-threaded IndexSearcher — analysis, the bag-of-words
 *                      BooleanQuery, search(query, K), the ids of the hits from doc values (Lucene's fastest path:
 *                      a stored field would decompress a block of contents per hit) — twice to warm the JIT the
 *                      first time, then timed (wall clock, and the CPU time of the whole JVM: search, GC, JIT); writes qid TAB
 *                      rank TAB id TAB score to RESULTS; one JSON line
 */
public final class Oracle {
  /** Anserini's DefaultEnglishAnalyzer with the Porter stemmer and Lucene's English stop words. */
  static final class DefaultEnglish extends Analyzer {
    @Override
    protected TokenStreamComponents createComponents(String field) {
      Tokenizer source = new StandardTokenizer();
      TokenStream result = new EnglishPossessiveFilter(source);
      result = new LowerCaseFilter(result);
      result = new StopFilter(result, EnglishAnalyzer.ENGLISH_STOP_WORDS_SET);
      result = new PorterStemFilter(result);
      return new TokenStreamComponents(source, result);
    }
  }

  static final class Stemmer extends Analyzer {
    @Override
    protected TokenStreamComponents createComponents(String field) {
      Tokenizer source = new WhitespaceTokenizer();
      return new TokenStreamComponents(source, new PorterStemFilter(source));
    }
  }

  static final class Standard extends Analyzer {
    @Override
    protected TokenStreamComponents createComponents(String field) {
      Tokenizer source = new StandardTokenizer();
      return new TokenStreamComponents(source, source);
    }
  }

  static List<String> tokens(Analyzer a, String text) throws IOException {
    List<String> out = new ArrayList<>();
    try (TokenStream ts = a.tokenStream("contents", new StringReader(text))) {
      CharTermAttribute term = ts.addAttribute(CharTermAttribute.class);
      ts.reset();
      while (ts.incrementToken()) out.add(term.toString());
      ts.end();
    }
    return out;
  }

  static List<String> lines(String path) throws IOException {
    return Files.readAllLines(Path.of(path), StandardCharsets.UTF_8);
  }

  public static void main(String[] args) throws Exception {
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    switch (args[0]) {
      case "analyze" -> {
        Analyzer a = new DefaultEnglish();
        for (String line : lines(args[1])) out.println(String.join(" ", tokens(a, unescape(line))));
      }
      case "tokenize" -> {
        Analyzer a = new Standard();
        for (String line : lines(args[1])) out.println(String.join("\u0001", tokens(a, unescape(line))));
      }
      case "stem" -> {
        Analyzer a = new Stemmer();
        for (String line : lines(args[1])) out.println(String.join(" ", tokens(a, line)));
      }
      case "search" -> search(args, out);
      case "bench" -> bench(args, out);
      case "norms" -> {
        // each line: length, its norm byte, the length that byte decodes to
        int n = Integer.parseInt(args[1]);
        for (int i = 0; i <= n; i++) {
          byte b = org.apache.lucene.util.SmallFloat.intToByte4(i);
          out.println(i + "\t" + Byte.toUnsignedInt(b) + "\t" + org.apache.lucene.util.SmallFloat.byte4ToInt(b));
        }
      }
      default -> throw new IllegalArgumentException("unknown mode " + args[0]);
    }
    out.flush();
  }

  static String unescape(String s) {
    return s.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\");
  }

  static void search(String[] args, PrintStream out) throws Exception {
    int k = Integer.parseInt(args[3]);
    float k1 = args.length > 4 ? Float.parseFloat(args[4]) : 0.9f;
    float b = args.length > 5 ? Float.parseFloat(args[5]) : 0.4f;
    Analyzer analyzer = new DefaultEnglish();
    BM25Similarity similarity = new BM25Similarity(k1, b);
    ByteBuffersDirectory dir = new ByteBuffersDirectory();
    IndexWriterConfig config = new IndexWriterConfig(analyzer).setSimilarity(similarity);
    try (IndexWriter writer = new IndexWriter(dir, config)) {
      for (String line : lines(args[1])) {
        int tab = line.indexOf('\t');
        Document doc = new Document();
        doc.add(new StringField("id", line.substring(0, tab), Field.Store.YES));
        doc.add(new TextField("contents", unescape(line.substring(tab + 1)), Field.Store.NO));
        writer.addDocument(doc);
      }
      writer.forceMerge(1);
    }
    try (DirectoryReader reader = DirectoryReader.open(dir)) {
      IndexSearcher searcher = new IndexSearcher(reader);
      searcher.setSimilarity(similarity);
      List<String> queries = lines(args[2]);
      for (int q = 0; q < queries.size(); q++) {
        // Pyserini's bag-of-words query: one SHOULD clause per analysed query token (a repeated term counts twice).
        BooleanQuery.Builder builder = new BooleanQuery.Builder();
        for (String t : tokens(analyzer, queries.get(q))) builder.add(new TermQuery(new Term("contents", t)), BooleanClause.Occur.SHOULD);
        TopDocs top = searcher.search(builder.build(), Math.max(1, reader.maxDoc()));
        List<String[]> hits = new ArrayList<>();
        for (ScoreDoc sd : top.scoreDocs) hits.add(new String[] {searcher.storedFields().document(sd.doc).get("id"), Float.toString(sd.score)});
        hits.sort((x, y) -> {
          int c = Float.compare(Float.parseFloat(y[1]), Float.parseFloat(x[1]));
          return c != 0 ? c : x[0].compareTo(y[0]);
        });
        for (int r = 0; r < Math.min(k, hits.size()); r++) out.println(q + "\t" + (r + 1) + "\t" + hits.get(r)[0] + "\t" + hits.get(r)[1]);
      }
    }
  }

  /** Peak resident memory of this process so far (VmHWM), in bytes; -1 where /proc is not there. */
  static long peakRss() {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
        if (line.startsWith("VmHWM:")) return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
      }
    } catch (IOException e) {
      // not Linux
    }
    return -1;
  }

  /** A hit's id from the "id" doc values (a fresh iterator: doc values iterate forward only). */
  static String idOf(org.apache.lucene.index.LeafReader leaf, int doc) throws IOException {
    BinaryDocValues ids = leaf.getBinaryDocValues("id");
    if (!ids.advanceExact(doc)) throw new IllegalStateException("no id for doc " + doc);
    return ids.binaryValue().utf8ToString();
  }

  static BooleanQuery bagOfWords(Analyzer analyzer, String text) throws IOException {
    BooleanQuery.Builder builder = new BooleanQuery.Builder();
    for (String t : tokens(analyzer, text)) builder.add(new TermQuery(new Term("contents", t)), BooleanClause.Occur.SHOULD);
    return builder.build();
  }

  static void bench(String[] args, PrintStream out) throws Exception {
    Path indexDir = Path.of(args[2]);
    int k = Integer.parseInt(args[3]);
    Analyzer analyzer = new DefaultEnglish();
    BM25Similarity similarity = new BM25Similarity(0.9f, 0.4f);
    double buildSeconds = -1;
    long buildPeakRss = -1;
    Path done = indexDir.resolve("bench-built");
    if (!Files.exists(done)) {
      FieldType contentsType = new FieldType(TextField.TYPE_NOT_STORED);
      contentsType.setIndexOptions(IndexOptions.DOCS_AND_FREQS);
      contentsType.freeze();
      long t0 = System.nanoTime();
      IndexWriterConfig config = new IndexWriterConfig(analyzer).setSimilarity(similarity).setRAMBufferSizeMB(256).setOpenMode(IndexWriterConfig.OpenMode.CREATE);
      try (FSDirectory dir = FSDirectory.open(indexDir); IndexWriter writer = new IndexWriter(dir, config); BufferedReader in = Files.newBufferedReader(Path.of(args[1]), StandardCharsets.UTF_8)) {
        for (String line = in.readLine(); line != null; line = in.readLine()) {
          int tab = line.indexOf('\t');
          String contents = unescape(line.substring(tab + 1));
          Document doc = new Document();
          doc.add(new StringField("id", line.substring(0, tab), Field.Store.YES));
          doc.add(new BinaryDocValuesField("id", new BytesRef(line.substring(0, tab))));
          doc.add(new Field("contents", contents, contentsType));
          doc.add(new StoredField("raw", contents));
          writer.addDocument(doc);
        }
        writer.forceMerge(1);
      }
      buildSeconds = (System.nanoTime() - t0) / 1e9;
      buildPeakRss = peakRss();
      Files.writeString(done, Double.toString(buildSeconds));
    }
    long indexBytes = 0;
    try (var files = Files.list(indexDir)) {
      for (Path p : (Iterable<Path>) files::iterator) indexBytes += Files.size(p);
    }
    try (FSDirectory dir = FSDirectory.open(indexDir); DirectoryReader reader = DirectoryReader.open(dir)) {
      IndexSearcher searcher = new IndexSearcher(reader); // no executor: one thread
      searcher.setSimilarity(similarity);
      if (reader.leaves().size() != 1) throw new IllegalStateException("expected one segment, found " + reader.leaves().size());
      var leaf = reader.leaves().get(0).reader();
      out.println("{\"ready\":true,\"version\":\"" + org.apache.lucene.util.Version.LATEST + "\",\"docs\":" + reader.maxDoc() + ",\"buildSeconds\":" + buildSeconds
          + ",\"buildPeakRssBytes\":" + buildPeakRss + ",\"indexBytes\":" + indexBytes + ",\"rssBytes\":" + peakRss() + "}");
      out.flush();
      // Commands on stdin, one a line: "search NAME QUERIES RESULTS" runs every query of QUERIES once, timed (the
      // first time a set is named: two passes first, to warm the JIT), and answers one JSON line.
      java.util.Set<String> warm = new java.util.HashSet<>();
      BufferedReader commands = new BufferedReader(new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
      for (String command = commands.readLine(); command != null; command = commands.readLine()) {
        String[] c = command.split(" ");
        List<String> queries = lines(c[2]);
        if (warm.add(c[1])) {
          for (int pass = 0; pass < 2; pass++) {
            for (String q : queries) {
              for (ScoreDoc sd : searcher.search(bagOfWords(analyzer, q), k).scoreDocs) idOf(leaf, sd.doc);
            }
          }
        }
        long[] latencies = new long[queries.size()];
        String[][] ids = new String[queries.size()][];
        float[][] scores = new float[queries.size()][];
        var os = (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        long cpu0 = os.getProcessCpuTime();
        long t0 = System.nanoTime();
        for (int i = 0; i < queries.size(); i++) {
          long t = System.nanoTime();
          ScoreDoc[] top = searcher.search(bagOfWords(analyzer, queries.get(i)), k).scoreDocs;
          ids[i] = new String[top.length];
          scores[i] = new float[top.length];
          for (int r = 0; r < top.length; r++) {
            ids[i][r] = idOf(leaf, top[r].doc);
            scores[i][r] = top[r].score;
          }
          latencies[i] = System.nanoTime() - t;
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        double cpuSeconds = (os.getProcessCpuTime() - cpu0) / 1e9;
        try (PrintStream res = new PrintStream(Files.newOutputStream(Path.of(c[3])), false, StandardCharsets.UTF_8)) {
          for (int i = 0; i < ids.length; i++) for (int r = 0; r < ids[i].length; r++) res.println(i + "\t" + (r + 1) + "\t" + ids[i][r] + "\t" + scores[i][r]);
        }
        java.util.Arrays.sort(latencies);
        out.println("{\"set\":\"" + c[1] + "\",\"qps\":" + (queries.size() / seconds) + ",\"cpuQps\":" + (queries.size() / cpuSeconds) + ",\"p50\":" + latencies[latencies.length / 2] / 1e9 + ",\"p99\":"
            + latencies[Math.min(latencies.length - 1, (int) (latencies.length * 0.99))] / 1e9 + "}");
        out.flush();
      }
    }
  }
}
