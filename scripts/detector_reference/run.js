// The detector's own runtime (TF.js, CPU backend) on one raw [1, 512, 512, 3] float32
// input: writes the graph's keypoints, wh and detections as raw float32 files.
// usage: node run.js PACKAGE_DIR/models INPUT.f32 OUT_PREFIX
const tf = require('@tensorflow/tfjs');
const fs = require('fs');
const [modelDir, inFile, outPrefix] = process.argv.slice(2);
(async () => {
  await tf.setBackend('cpu');
  const json = JSON.parse(fs.readFileSync(modelDir + '/centernet.json'));
  const specs = json.weightsManifest.flatMap((g) => g.weights);
  const data = Buffer.concat(json.weightsManifest.flatMap((g) => g.paths.map((p) => fs.readFileSync(modelDir + '/' + p))));
  const ab = data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength);
  const model = await tf.loadGraphModel(tf.io.fromMemory({modelTopology: json.modelTopology, weightSpecs: specs, weightData: ab, format: json.format, signature: json.signature}));
  const buf = fs.readFileSync(inFile);
  const x = tf.tensor(new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4), [1, 512, 512, 3]);
  const outs = model.execute(x, ['tower_0/keypoints', 'tower_0/wh', 'tower_0/detections']);
  const names = ['keypoints', 'wh', 'detections'];
  for (let i = 0; i < 3; i++) fs.writeFileSync(outPrefix + '.' + names[i] + '.f32', Buffer.from((await outs[i].data()).buffer));
})();
