"""A typical COCO retrieval evaluation script (`compute_retrieval_metrics`, from the project's founding spec),
copied verbatim: it is the spec that
``evaluate`` must reproduce for R@K / MeanR / MedianR, and the slow baseline users would otherwise run. Used by the
tests and the benchmarks; never by the library itself."""

import numpy as np


def compute_retrieval_metrics(similarities, ground_truth_indices):
    N = similarities.shape[0]
    ranks = []

    for i in range(N):
        # 按相似度降序排列
        sorted_indices = np.argsort(-similarities[i])

        # 找到第一个标准答案的排名
        gt = set(ground_truth_indices[i])
        for rank, idx in enumerate(sorted_indices):
            if idx in gt:
                ranks.append(rank + 1)  # 1-indexed
                break

    ranks = np.array(ranks)

    return {
        "R@1": 100.0 * np.mean(ranks <= 1),
        "R@5": 100.0 * np.mean(ranks <= 5),
        "R@10": 100.0 * np.mean(ranks <= 10),
        "MeanR": np.mean(ranks),
        "MedianR": np.median(ranks),
    }


def evaluate_retrieval(image_embeddings, text_embeddings, image_ids, caption_image_ids):
    # 计算相似度矩阵
    similarities = np.dot(text_embeddings, image_embeddings.T)  # (N_texts, N_images)

    # 文本 → 图像检索
    t2i_gt = []
    for caption_img_id in caption_image_ids:
        gt_indices = [i for i, img_id in enumerate(image_ids) if img_id == caption_img_id]
        t2i_gt.append(gt_indices)

    t2i_metrics = compute_retrieval_metrics(similarities, t2i_gt)

    # 图像 → 文本检索
    i2t_gt = []
    for img_id in image_ids:
        gt_indices = [i for i, cap_img_id in enumerate(caption_image_ids) if cap_img_id == img_id]
        i2t_gt.append(gt_indices)

    i2t_metrics = compute_retrieval_metrics(similarities.T, i2t_gt)

    return {"text_to_image": t2i_metrics, "image_to_text": i2t_metrics}
